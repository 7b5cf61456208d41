# llm-tools: one Makefile.
#
#   make              libllm.a and the tools (CUDA kernels too when nvcc is found)
#   make CUDA=0       CPU-only build
#   make test         install missing build dependencies, build, run unit + CLI tests
#   make sanitize     the same tests under ASan + UBSan (separate build dir)
#   make fuzz         build the libFuzzer targets (clang) and run each for FUZZ_SECONDS
#   make demo         fetch SmolLM2-135M-Instruct, convert it, print --info, quantize it
#                     with GPTQ and compare the result with the published model
#   make man          regenerate completions from the option tables
#   make install      PREFIX=/usr/local
#   V=1               show full commands

PREFIX  ?= /usr/local
BUILD   ?= build
CC      ?= cc
PKGS    := yaml-0.1 libzstd libxxhash jansson libpcre2-8 libutf8proc
VERSION := 0.1.0
COMMIT  := $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)

OPT     ?= -O2
CFLAGS_BASE := -std=c11 -D_GNU_SOURCE -g $(OPT) -Wall -Wextra -Wpointer-arith \
               -Wshadow -Wno-missing-field-initializers -Werror -MMD -MP \
               -DLLM_VERSION='"$(VERSION)"' -DLLM_COMMIT='"$(COMMIT)"'
PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS   := $(shell pkg-config --libs $(PKGS) 2>/dev/null || echo -lyaml -lzstd -lxxhash -ljansson -lpcre2-8 -lutf8proc)
CFLAGS  += $(CFLAGS_BASE) $(PKG_CFLAGS) $(SAN_FLAGS)
LDLIBS  += $(PKG_LIBS) -lm -lpthread
LDFLAGS += $(SAN_FLAGS)

# ---- CUDA: on when nvcc is found, unless CUDA=0 ---------------------------
NVCC ?= $(shell command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
ifeq ($(NVCC),)
CUDA ?= 0
else
CUDA ?= 1
endif
CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(NVCC))
# sm_80 (A100), sm_90 (H100/H200) and PTX for anything newer
CUDA_ARCH ?= -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 \
             -gencode arch=compute_90,code=compute_90
NVCCFLAGS ?= -O2 -std=c++17 $(CUDA_ARCH) -Xcompiler -Wall,-Wextra,-Werror -Werror all-warnings

LIB_SRCS := $(sort $(wildcard lib/*/*.c))
ifeq ($(CUDA),1)
LIB_SRCS := $(filter-out lib/gpu/cuda_none.c,$(LIB_SRCS))
CU_SRCS  := $(sort $(wildcard kernels/*.cu))
CFLAGS   += -DLLM_CUDA=1 -I$(CUDA_HOME)/include
LDLIBS   += -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcublas -lcudart -lstdc++
else
LIB_SRCS := $(filter-out lib/gpu/cuda.c,$(LIB_SRCS))
CU_SRCS  :=
endif
LIB_OBJS := $(LIB_SRCS:%=$(BUILD)/%.o) $(CU_SRCS:%=$(BUILD)/%.o)

# LLM_COMMIT is compiled into these objects (--version, bench rows, the
# quantizer's metadata); a stamp rewritten only when the commit changes
# rebuilds them, so that an incremental build does not keep an old commit.
COMMIT_STAMP := $(BUILD)/commit.stamp
$(shell mkdir -p $(BUILD) && { [ "$$(cat $(COMMIT_STAMP) 2>/dev/null)" = "$(COMMIT)" ] || echo "$(COMMIT)" > $(COMMIT_STAMP); })
$(BUILD)/lib/common/cli.c.o $(BUILD)/lib/bench/machine.c.o $(BUILD)/cmd/llm-quantize.c.o: $(COMMIT_STAMP)
LIB      := $(BUILD)/libllm.a

CMD_SRCS := $(sort $(wildcard cmd/llm-*.c))
BINS     := $(CMD_SRCS:cmd/%.c=bin/%)
ifneq ($(BUILD),build)
BINS     := $(CMD_SRCS:cmd/%.c=$(BUILD)/bin/%)
endif

UNIT_SRCS := $(sort $(wildcard tests/unit/*/*.c) $(wildcard tests/unit/*.c))
UNIT_OBJS := $(UNIT_SRCS:%=$(BUILD)/%.o)
UNIT_BIN  := $(BUILD)/test-unit

GPU_SRCS := $(sort $(wildcard tests/gpu/test_*.c))
GPU_BINS := $(GPU_SRCS:tests/gpu/%.c=$(BUILD)/gpu/%)

ifeq ($(V),1)
Q :=
else
Q := @
endif

.SECONDARY:

.PHONY: all lib test check unit cli sanitize fuzz demo man install clean deps gpu-tests format
.DEFAULT_GOAL := all

all: $(LIB) $(BINS) $(if $(filter 1,$(CUDA)),$(GPU_BINS))

lib: $(LIB)

$(BUILD)/%.c.o: %.c
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC      $<")
	$(Q)$(CC) $(CFLAGS) -c $< -o $@

$(BUILD)/%.cu.o: %.cu
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  NVCC    $<")
	$(Q)$(NVCC) $(NVCCFLAGS) -Ilib -c $< -o $@

$(LIB): $(LIB_OBJS)
	@$(if $(Q),echo "  AR      $@")
	$(Q)rm -f $@ && ar rcs $@ $^

bin/llm-% $(BUILD)/bin/llm-%: $(BUILD)/cmd/llm-%.c.o $(LIB)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(LDFLAGS) -o $@ $< $(LIB) $(LDLIBS)

$(UNIT_BIN): $(UNIT_OBJS) $(LIB)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(LDFLAGS) -o $@ $(UNIT_OBJS) $(LIB) $(LDLIBS) -lcriterion

$(BUILD)/gpu/%: $(BUILD)/tests/gpu/%.c.o $(LIB)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(LDFLAGS) -o $@ $< $(LIB) $(LDLIBS)

gpu-tests: $(GPU_BINS)

# ---- tests ----------------------------------------------------------------
# `make test` first makes sure the build dependencies are installed
# (apt-get as root; otherwise it prints the command and stops).
deps:
	@scripts/deps.sh build

test: deps
	@$(MAKE) --no-print-directory check

check: all $(UNIT_BIN)
	@echo "== unit tests"
	$(Q)LLM_BIN=$(abspath $(dir $(firstword $(BINS)))) $(UNIT_BIN) --jobs 2
	@echo "== cli tests"
	$(Q)LLM_BIN=$(abspath $(dir $(firstword $(BINS)))) tests/cli/run.sh

unit: $(UNIT_BIN)
	$(UNIT_BIN)

cli: all
	LLM_BIN=$(abspath bin) tests/cli/run.sh

SAN := -fsanitize=address,undefined,float-cast-overflow -fno-omit-frame-pointer -fno-sanitize-recover=all
sanitize: deps
	@$(MAKE) --no-print-directory BUILD=build-san CUDA=0 OPT=-O1 SAN_FLAGS="$(SAN)" check

FUZZ_SECONDS ?= 20
fuzz: deps
	@scripts/fuzz.sh $(FUZZ_SECONDS)

demo:
	@scripts/deps.sh demo
	@$(MAKE) --no-print-directory all
	@scripts/demo.sh

man: all
	@scripts/gen-completions.sh

install: all
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/share/man/man1 \
	    $(DESTDIR)$(PREFIX)/share/man/man5 $(DESTDIR)$(PREFIX)/share/man/man7
	install -m 755 $(BINS) $(DESTDIR)$(PREFIX)/bin
	install -m 644 man/*.1 $(DESTDIR)$(PREFIX)/share/man/man1
	install -m 644 man/*.5 $(DESTDIR)$(PREFIX)/share/man/man5
	install -m 644 man/*.7 $(DESTDIR)$(PREFIX)/share/man/man7
	install -d $(DESTDIR)$(PREFIX)/share/llm-tools/grammars
	install -m 644 grammars/*.gbnf $(DESTDIR)$(PREFIX)/share/llm-tools/grammars
	install -d $(DESTDIR)$(PREFIX)/share/bash-completion/completions \
	    $(DESTDIR)$(PREFIX)/share/zsh/site-functions $(DESTDIR)$(PREFIX)/share/fish/vendor_completions.d
	for b in $(notdir $(BINS)); do \
	    install -m 644 completions/llm.bash $(DESTDIR)$(PREFIX)/share/bash-completion/completions/$$b; \
	    install -m 644 completions/llm.fish $(DESTDIR)$(PREFIX)/share/fish/vendor_completions.d/$$b.fish; \
	done
	install -m 644 completions/_llm $(DESTDIR)$(PREFIX)/share/zsh/site-functions/_llm

format:
	clang-format -i lib/*/*.c lib/*/*.h cmd/*.c kernels/*.cu

clean:
	rm -rf build build-san build-fuzz bin

-include $(LIB_OBJS:.o=.d) $(UNIT_OBJS:.o=.d) $(BUILD)/cmd/*.d

# ---- CPU matrix-product microbenchmark (GB/s of weights, GFLOP/s) ---------
.PHONY: bench-matmul
bench-matmul: $(BUILD)/bench-matmul
	$(BUILD)/bench-matmul

$(BUILD)/bench-matmul: $(BUILD)/tests/bench/bench_matmul.c.o $(LIB)
	@$(if $(Q),echo "  LD      $@")
	$(Q)$(CC) $(LDFLAGS) -o $@ $< $(LIB) $(LDLIBS)
-include $(BUILD)/tests/bench/bench_matmul.c.d
