# Kazeia-Engine build. Plain make, C11, no dependency beyond libc/libm/pthread.
#   make            -> build/libkazeia.a build/libkazeia.so build/kazeia build/<tools>
#   make test       -> C unit tests + Python conformance tests (needs the pip packages .ci/run installs)
#   make test-c     -> C unit tests only
#   make SAN=1 ...  -> same in build-san/ with AddressSanitizer + UBSan
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
CFLAGS  += -std=c11 -D_GNU_SOURCE -Wall -Wextra -fPIC $(OPT) -Iinclude -Isrc
LDLIBS  := -lm -lpthread

SRC     := $(wildcard src/*.c)
OBJ     := $(patsubst src/%.c,$(BUILD)/obj/%.o,$(SRC))
CLI_SRC := $(wildcard cli/*.c)
CLI_OBJ := $(patsubst cli/%.c,$(BUILD)/obj/cli/%.o,$(CLI_SRC))
TOOLS   := $(patsubst tools/%.c,$(BUILD)/%,$(wildcard tools/*.c))
TESTS   := $(patsubst tests/%.c,$(BUILD)/%,$(wildcard tests/test_*.c))
DEPS    := $(OBJ:.o=.d) $(CLI_OBJ:.o=.d)

all: $(BUILD)/libkazeia.a $(BUILD)/libkazeia.so $(BUILD)/kazeia $(TOOLS)

$(BUILD)/obj/%.o: src/%.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -MMD -MP -c $< -o $@
$(BUILD)/obj/cli/%.o: cli/%.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -MMD -MP -c $< -o $@

$(BUILD)/libkazeia.a: $(OBJ)
	@rm -f $@
	ar rcs $@ $^
$(BUILD)/libkazeia.so: $(OBJ)
	$(CC) -shared $(LDSAN) -o $@ $^ $(LDLIBS)
$(BUILD)/kazeia: $(CLI_OBJ) $(BUILD)/libkazeia.a
	$(CC) $(LDSAN) -o $@ $(CLI_OBJ) $(BUILD)/libkazeia.a $(LDLIBS)
$(BUILD)/%: tools/%.c $(BUILD)/libkazeia.a
	$(CC) $(CFLAGS) $(LDSAN) -o $@ $< $(BUILD)/libkazeia.a $(LDLIBS)
$(BUILD)/test_%: tests/test_%.c tests/kt.h $(BUILD)/libkazeia.a
	$(CC) $(CFLAGS) $(LDSAN) -o $@ $< $(BUILD)/libkazeia.a $(LDLIBS)

tests-build: all $(TESTS)

test-c: tests-build
	@KZ_BUILD=$(BUILD) bash tests/run_c_tests.sh $(TESTS)

# Under SAN=1 the Python tests load the instrumented libkazeia.so through ctypes, which needs the
# sanitizer runtimes preloaded into python; python itself leaks by design, so leak checks stay in
# the C tests.
ifeq ($(SAN),1)
PYENV := LD_PRELOAD="$$($(CC) -print-file-name=libasan.so):$$($(CC) -print-file-name=libubsan.so)" \
         ASAN_OPTIONS=detect_leaks=0:abort_on_error=1
endif
test-py: all
	KZ_BUILD=$(BUILD) $(PYENV) python3 -m pytest -q tests/py

test: test-c test-py

# The main job on a fresh machine: a random-weight model with the real Qwen3.5-0.8B shapes (Q4_0),
# then a streamed generation with prefill/decode speed and peak RSS on stderr.
DEMO_MODEL ?= $(BUILD)/demo-qwen35-0.8b-q4_0.gguf
demo: all
	@test -f $(DEMO_MODEL) || $(BUILD)/kz-mkmodel --arch qwen35 --preset qwen35-0.8b --type q4_0 -o $(DEMO_MODEL)
	$(BUILD)/kazeia info $(DEMO_MODEL) | head -40
	$(BUILD)/kazeia run -m $(DEMO_MODEL) -p "Bonjour ! Explique-moi la photosynthèse." -n 32 --no-think --seed 1

clean:
	rm -rf build build-san

.PHONY: all tests-build test test-c test-py demo clean
-include $(DEPS)
