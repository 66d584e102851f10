# Kazeia-Engine build. Plain make, C11, no dependency beyond libc/libm/pthread.
#   make            -> build/libkazeia.a build/libkazeia.so build/kazeia build/<tools>
#   make test       -> C unit tests, the README's C example, Python conformance tests (installs the
#                      missing Python packages first: tests/install_deps.sh)
#   make test-c     -> C unit tests, the export check of libkazeia.so and the README's C example
#   make SAN=1 ...  -> same in build-san/ with AddressSanitizer + UBSan
# libkazeia.so (what an app links) exports only the functions of include/kazeia.h: the library
# objects are compiled with -fvisibility=hidden and the header marks its functions KZ_API.
CC      ?= cc
SAN     ?= 0
ifeq ($(SAN),1)
BUILD   ?= build-san
OPT     ?= -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined
LDSAN   := -fsanitize=address,undefined
else
BUILD   ?= build
OPT     ?= -O2 -g
LDSAN   :=
endif
CFLAGS  ?=
CFLAGS  += -std=c11 -D_GNU_SOURCE -Wall -Wextra -fPIC $(OPT) -Iinclude -Isrc -I.
LDLIBS  := -lm -lpthread
# Android's libc (bionic) holds the pthread functions; the NDK ships no libpthread to link
ifneq ($(findstring android,$(shell $(CC) -dumpmachine 2>/dev/null)),)
LDLIBS  := -lm
endif

# the library: what an app links (include/kazeia.h and what implements it)
LIB_SRC := $(shell find src -name '*.c' | sort)
OBJ     := $(patsubst %.c,$(BUILD)/obj/%.o,$(LIB_SRC))
# the random-model writer, for the tests and tools (build/libkztools.a)
KZTOOLS_SRC := tools/mkmodel/mkmodel.c
KZTOOLS_OBJ := $(patsubst %.c,$(BUILD)/obj/%.o,$(KZTOOLS_SRC))
CLI_SRC := $(wildcard cli/*.c) $(wildcard cli/bench/*.c)
CLI_OBJ := $(patsubst %.c,$(BUILD)/obj/%.o,$(CLI_SRC))
TOOLS   := $(patsubst tools/%.c,$(BUILD)/%,$(wildcard tools/*.c))
TESTS   := $(patsubst tests/%.c,$(BUILD)/%,$(wildcard tests/test_*.c))
DEPS    := $(OBJ:.o=.d) $(KZTOOLS_OBJ:.o=.d) $(CLI_OBJ:.o=.d)
# hidden: the default for library objects; the dev library's sub-make sets default
VIS     ?= hidden
$(BUILD)/obj/src/%.o: CFLAGS += -fvisibility=$(VIS)

all: $(BUILD)/libkazeia.a $(BUILD)/libkazeia.so $(BUILD)/kazeia $(TOOLS)

# AArch64: the SDOT / SMMLA kernel files need their extensions enabled; run-time dispatch
# (src/cpu.c) calls them only on CPUs that have them. x86 SIMD uses target attributes instead.
ifneq ($(findstring aarch64,$(shell $(CC) -dumpmachine)),)
# one unit per flag set: src/matmul/arm/dotprod.c and src/matmul/arm/i8mm.c
$(BUILD)/obj/src/matmul/arm/dotprod.o: CFLAGS += -march=armv8.2-a+dotprod
$(BUILD)/obj/src/matmul/arm/i8mm.o: CFLAGS += -march=armv8.2-a+dotprod+i8mm
endif

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -MMD -MP -c $< -o $@

$(BUILD)/libkazeia.a: $(OBJ)
	@rm -f $@
	ar rcs $@ $^
$(BUILD)/libkazeia.so: $(OBJ)
	$(CC) -shared $(LDSAN) -o $@ $^ $(LDLIBS)
$(BUILD)/libkztools.a: $(KZTOOLS_OBJ)
	@rm -f $@
	ar rcs $@ $^
# The dev library (make dev): the same sources with every symbol visible, plus the model writer
# and the bandwidth sampler, for ctypes (tests/py, bench/compare_llamacpp.py); not part of `all`,
# whose users need only the app library. Its objects are built by a sub-make in $(BUILD)/dev
# with VIS=default, so every per-file flag applies there too.
ifeq ($(VIS),default)
$(DEV_SO): $(OBJ) $(KZTOOLS_OBJ) $(BUILD)/obj/cli/bench/membw.o
	$(CC) -shared $(LDSAN) -o $@ $^ $(LDLIBS)
else
$(BUILD)/libkazeia_dev.so: FORCE
	@$(MAKE) --no-print-directory BUILD=$(BUILD)/dev VIS=default DEV_SO=$@ $@
endif
# the built-in default model: cli/default_model.c .incbin's it into the kazeia binary
DEFAULT_MODEL := models/kazeia-default.gguf
$(BUILD)/obj/cli/default_model.o: CFLAGS += -DKZ_DEFAULT_MODEL_FILE='"$(DEFAULT_MODEL)"'
$(BUILD)/obj/cli/default_model.o: $(DEFAULT_MODEL)
$(BUILD)/kazeia: $(CLI_OBJ) $(BUILD)/libkazeia.a
	$(CC) $(LDSAN) -o $@ $(CLI_OBJ) $(BUILD)/libkazeia.a $(LDLIBS)
$(BUILD)/%: tools/%.c $(BUILD)/obj/cli/args.o $(BUILD)/libkztools.a $(BUILD)/libkazeia.a
	$(CC) $(CFLAGS) $(LDSAN) -o $@ $< $(BUILD)/obj/cli/args.o $(BUILD)/libkztools.a $(BUILD)/libkazeia.a $(LDLIBS)
$(BUILD)/test_%: tests/test_%.c tests/kt.h tests/kt_model.h $(BUILD)/libkztools.a $(BUILD)/libkazeia.a
	$(CC) $(CFLAGS) $(LDSAN) -o $@ $< $(BUILD)/libkztools.a $(BUILD)/libkazeia.a $(LDLIBS)

tests-build: all dev $(TESTS)

test-c: tests-build example
	@bash tests/check_exports.sh $(BUILD)/libkazeia.so include/kazeia.h
	@KZ_BUILD=$(BUILD) bash tests/run_c_tests.sh $(TESTS)

# The README's C example: examples/hello.c against the public header and the static library only,
# run on a tiny random-weight model (it prints gibberish; it must exit 0).
EXAMPLE_MODEL := $(BUILD)/example-qwen35-tiny-q8_0.gguf
$(BUILD)/hello: examples/hello.c include/kazeia.h $(BUILD)/libkazeia.a
	$(CC) -std=c11 -Wall -Wextra $(OPT) -Iinclude $(LDSAN) -o $@ $< $(BUILD)/libkazeia.a $(LDLIBS)
$(EXAMPLE_MODEL): $(BUILD)/kz-mkmodel
	$(BUILD)/kz-mkmodel --arch qwen35 --type q8_0 -q -o $@
example: $(BUILD)/hello $(EXAMPLE_MODEL)
	@awk '/^```c$$/{f=1;next} /^```$$/{f=0} f' README.md | cmp -s - examples/hello.c || \
	  { echo "README.md's C example differs from examples/hello.c: keep them the same"; exit 1; }
	$(BUILD)/hello $(EXAMPLE_MODEL)

# The Python packages tests/py needs (a no-op when they are all importable).
py-deps:
	bash tests/install_deps.sh

# Under SAN=1 the Python tests load the instrumented libkazeia.so through ctypes, which needs the
# sanitizer runtimes preloaded into python; python itself leaks by design, so leak checks stay in
# the C tests.
ifeq ($(SAN),1)
PYENV := LD_PRELOAD="$$($(CC) -print-file-name=libasan.so):$$($(CC) -print-file-name=libubsan.so)" \
         ASAN_OPTIONS=detect_leaks=0:abort_on_error=1
endif
dev: $(BUILD)/libkazeia_dev.so

test-py: all dev py-deps
	KZ_BUILD=$(BUILD) $(PYENV) python3 -m pytest -q tests/py

test: test-c test-py

# The main job on a fresh machine: the built-in default model (models/kazeia-default.gguf, a small
# Qwen3.5 base model trained by training/) continues two prompts, prefill/decode speed and peak
# RSS on stderr; then the same engine on a random-weight model with the real Qwen3.5-0.8B shapes.
DEMO_MODEL ?= $(BUILD)/demo-qwen35-0.8b-q4_0.gguf
demo: all
	$(BUILD)/kazeia run -p "The history of the city begins" -n 64 --seed 3
	@echo
	$(BUILD)/kazeia run -p "Le lendemain matin, le jeune homme" -n 64 --seed 3
	@echo
	@test -f $(DEMO_MODEL) || $(BUILD)/kz-mkmodel --arch qwen35 --preset qwen35-0.8b --type q4_0 -o $(DEMO_MODEL)
	$(BUILD)/kazeia run -m $(DEMO_MODEL) -p "Bonjour ! Explique-moi la photosynthèse." -n 32 --no-think --seed 1 > /dev/null

# Fuzzing (clang + libFuzzer, ASan + UBSan): fuzz/fuzz_<target>.c, seeds in fuzz/corpus/<target>.
#   make fuzz        -> build-fuzz/fuzz_{gguf,model,tokenizer,chat}
#   make fuzz-smoke  -> each target FUZZ_SECS seconds from its seeds (CI); new inputs go to
#                       build-fuzz/work/<target>, crashes to build-fuzz/artifacts/
#   make fuzz-seeds  -> regenerate the binary seeds (fuzz/corpus/{gguf,model}) with the writers
FUZZ_CC      ?= clang
FUZZ_BUILD   ?= build-fuzz
FUZZ_SECS    ?= 25
FUZZ_TARGETS := gguf model tokenizer chat
FUZZ_CFLAGS  := -std=c11 -D_GNU_SOURCE -Wall -Wextra -O2 -g -fno-omit-frame-pointer \
                -fsanitize=address,undefined -fno-sanitize-recover=undefined -Iinclude -Isrc -I. -Ifuzz
FUZZ_OBJ     := $(patsubst %.c,$(FUZZ_BUILD)/obj/%.o,$(LIB_SRC))
FUZZ_BINS    := $(patsubst %,$(FUZZ_BUILD)/fuzz_%,$(FUZZ_TARGETS))

$(FUZZ_BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link -MMD -MP -c $< -o $@
$(FUZZ_BUILD)/fuzz_%: fuzz/fuzz_%.c fuzz/fuzz_check.h fuzz/fuzz_common.h fuzz/vocab_small.h $(FUZZ_OBJ)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer -o $@ $< $(FUZZ_OBJ) $(LDLIBS)

fuzz: $(FUZZ_BINS)
.SECONDARY: $(FUZZ_OBJ)

fuzz-smoke: fuzz
	@mkdir -p $(FUZZ_BUILD)/artifacts
	@set -e; for t in $(FUZZ_TARGETS); do \
	  mkdir -p $(FUZZ_BUILD)/work/$$t; \
	  echo "== fuzz_$$t for $(FUZZ_SECS) s"; \
	  log=$(FUZZ_BUILD)/work/$$t.log; \
	  $(FUZZ_BUILD)/fuzz_$$t -max_total_time=$(FUZZ_SECS) -timeout=20 -rss_limit_mb=2048 \
	    -print_final_stats=1 -artifact_prefix=$(FUZZ_BUILD)/artifacts/$$t- \
	    $(FUZZ_BUILD)/work/$$t fuzz/corpus/$$t >$$log 2>&1 || \
	    { tail -60 $$log; echo "fuzz_$$t FAILED (input in $(FUZZ_BUILD)/artifacts)"; exit 1; }; \
	  grep -E 'stat::number_of_executed_units|stat::peak_rss_mb' $$log; \
	done

fuzz-seeds: $(BUILD)/libkztools.a $(BUILD)/libkazeia.a
	$(CC) $(CFLAGS) -Ifuzz -o $(BUILD)/gen_seeds fuzz/gen_seeds.c $(BUILD)/libkztools.a $(BUILD)/libkazeia.a $(LDLIBS)
	$(BUILD)/gen_seeds fuzz/corpus

# for scripts that compile the sources themselves (tests/robustness_ci.sh): the library and the
# model writer the tests use
print-src:
	@echo $(LIB_SRC) $(KZTOOLS_SRC)

clean:
	rm -rf build build-san build-fuzz

FORCE:
.PHONY: FORCE print-src all dev tests-build test test-c test-py py-deps example demo clean fuzz fuzz-smoke fuzz-seeds
-include $(DEPS)
-include $(FUZZ_OBJ:.o=.d)

# ---- chat (issue 24): `kazeia chat` through a real terminal (tmux), part of `make test` ----
test-chat-tty: all
	@if command -v tmux >/dev/null; then KZ_BUILD=$(BUILD) bash tests/chat_tty.sh; \
	 else echo "test-chat-tty: tmux is not installed, skipped (apt-get install tmux)"; fi
test: test-chat-tty
.PHONY: test-chat-tty
# the two-turn chat example of docs/chat.md, against the public header and static library
$(BUILD)/chat-example: examples/chat.c include/kazeia.h $(BUILD)/libkazeia.a
	$(CC) -std=c11 -Wall -Wextra $(OPT) -Iinclude $(LDSAN) -o $@ $< $(BUILD)/libkazeia.a $(LDLIBS)
example-chat: $(BUILD)/chat-example $(EXAMPLE_MODEL)
	@awk '/^```c$$/{f=1;next} /^```$$/{f=0} f' docs/chat.md | cmp -s - examples/chat.c || \
	  { echo "docs/chat.md's C example differs from examples/chat.c: keep them the same"; exit 1; }
	$(BUILD)/chat-example $(EXAMPLE_MODEL)
test-c: example-chat
.PHONY: example-chat
# ---- android (issue 26): the JNI library an app ships, and its JVM tests ----
#   make jni       -> $(BUILD)/libkazeia_engine.so: the engine linked statically + jni/kazeia_jni.c,
#                     exporting JNI_OnLoad and Java_* only, LOAD segments 16 KB aligned (Android 15+)
#   make test-jni  -> the .so's checks (tests/check_jni_so.sh) and the JUnit tests on this JVM
# JNI headers: the JDK's for a host build; the NDK's sysroot has jni.h (JNI_CFLAGS= for it).
JAVA_HOME  ?= $(patsubst %/bin/javac,%,$(realpath $(shell command -v javac 2>/dev/null)))
JNI_CFLAGS ?= $(if $(findstring android,$(shell $(CC) -dumpmachine 2>/dev/null)),,-I$(JAVA_HOME)/include -I$(JAVA_HOME)/include/linux)
JNI_LDLIBS := $(if $(findstring android,$(shell $(CC) -dumpmachine 2>/dev/null)),-lm -ldl,-lm -ldl -lpthread)
JNI_SO     := $(BUILD)/libkazeia_engine.so
$(BUILD)/obj/jni/kazeia_jni.o: jni/kazeia_jni.c include/kazeia.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(JNI_CFLAGS) -fvisibility=hidden -MMD -MP -c $< -o $@
$(JNI_SO): $(OBJ) $(BUILD)/obj/jni/kazeia_jni.o jni/libkazeia_engine.map
	$(CC) -shared $(LDSAN) -o $@ $(OBJ) $(BUILD)/obj/jni/kazeia_jni.o \
	  -Wl,--version-script=jni/libkazeia_engine.map -Wl,-z,max-page-size=16384 -Wl,--as-needed \
	  -Wl,--no-undefined -Wl,-soname,libkazeia_engine.so $(JNI_LDLIBS)
jni: $(JNI_SO)

# JVM tests: the Java wrapper (android/kazeia-android/src/main/java) + JUnit 4 (Debian junit4),
# and the Kotlin sources but the Flow layer with Debian's kotlinc + kotlinx-coroutines 1.0 when
# installed (kotlin, libkotlinx-coroutines-java, libkotlinx-atomicfu-java), on tiny models.
JUNIT_CP ?= /usr/share/java/junit4.jar:/usr/share/java/hamcrest-core.jar
JVM_DIR  := $(BUILD)/jvm
$(BUILD)/jni_fixture: tests/jni/jni_fixture.c $(BUILD)/libkztools.a $(BUILD)/libkazeia.a
	$(CC) $(CFLAGS) $(LDSAN) -o $@ $< $(BUILD)/libkztools.a $(BUILD)/libkazeia.a $(LDLIBS)
test-jni: $(JNI_SO) $(BUILD)/jni_fixture $(BUILD)/kz-mkmodel $(BUILD)/kazeia
	@bash tests/check_jni_so.sh $(JNI_SO)
	@# the check must refuse a library linked the plain way (C++ runtime, every kz_ symbol, 4 KB pages)
	@mkdir -p $(JVM_DIR)
	@$(CC) -shared -o $(JVM_DIR)/unchecked.so $(OBJ) $(BUILD)/obj/jni/kazeia_jni.o -Wl,-z,max-page-size=4096 \
	  -Wl,--no-as-needed -lstdc++ $(JNI_LDLIBS)
	@out=$$(bash tests/check_jni_so.sh $(JVM_DIR)/unchecked.so 2>&1) && { echo "check_jni_so passed $(JVM_DIR)/unchecked.so"; exit 1; }; \
	  for w in libstdc++ 'exports kz_generate' 'not 16 KB aligned'; do \
	    echo "$$out" | grep -q "$$w" || { echo "check_jni_so did not report '$$w' on unchecked.so"; exit 1; }; done; \
	  echo "check_jni_so: refuses a plainly linked library (NEEDED libstdc++, kz_* exports, 4 KB LOAD)"
	@JUNIT_CP=$(JUNIT_CP) KZ_BUILD=$(BUILD) bash tests/jni/run_jvm_tests.sh
.PHONY: jni test-jni
# ---- armic (issue 27): the instruction-counting QEMU plugin (host build) for bench/arm_icount.sh
icount-plugin: build/kz-icount.so
build/kz-icount.so: tools/qemu-icount/icount.c
	@mkdir -p build
	gcc -std=c11 -Wall -Wextra -O2 -shared -fPIC -fvisibility=hidden -o $@ $<
.PHONY: icount-plugin

# issue 25 (speculative verify cost): the AArch64 thin K-quant gemms need SDOT like dotprod.c
ifneq ($(findstring aarch64,$(shell $(CC) -dumpmachine)),)
$(BUILD)/obj/src/matmul/arm/thin.o: CFLAGS += -march=armv8.2-a+dotprod
endif
