// kazeia-android: the Kotlin / Java API over libkazeia_engine.so (an Android library module).
// Use from an app: include this folder as a module (settings.gradle.kts:
//   include(":kazeia-android"); project(":kazeia-android").projectDir = file("<engine>/android/kazeia-android"))
// and `implementation(project(":kazeia-android"))`. The native library is built from the engine's
// sources by CMakeLists.txt beside this file (NDK r27+, arm64-v8a, API 28+, 16 KB pages).
plugins {
    id("com.android.library") version "8.7.3"
    id("org.jetbrains.kotlin.android") version "2.0.21"
}

android {
    namespace = "org.kazeia.engine"
    compileSdk = 35
    ndkVersion = "27.2.12479018"

    defaultConfig {
        minSdk = 28
        consumerProguardFiles("consumer-rules.pro")
        ndk { abiFilters += listOf("arm64-v8a") }
        externalNativeBuild {
            cmake {
                arguments += listOf("-DANDROID_STL=none", "-DANDROID_SUPPORT_FLEXIBLE_PAGE_SIZES=ON")
            }
        }
    }

    externalNativeBuild {
        cmake {
            path = file("CMakeLists.txt")
            version = "3.22.1"
        }
    }

    buildTypes {
        release {
            isMinifyEnabled = false
        }
    }

    compileOptions {
        sourceCompatibility = JavaVersion.VERSION_17
        targetCompatibility = JavaVersion.VERSION_17
    }
    kotlinOptions { jvmTarget = "17" }

    sourceSets["main"].java.srcDirs("src/main/java", "src/main/kotlin")
    // the JUnit tests in src/test need the host-built .so (make test-jni runs them); not Gradle's
    sourceSets["test"].java.setSrcDirs(emptyList<String>())
}

dependencies {
    implementation("org.jetbrains.kotlinx:kotlinx-coroutines-core:1.9.0")
}
