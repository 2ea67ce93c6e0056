# streambatch — dependencies, build, tests, run. The README's two commands are `make run` and
# `make test`; both install what is missing first (`make deps`).
#
# Layout of the build (everything under $(BUILD), binaries under $(BINDIR)):
#   every lib/*/*.c, controller/**/*.c and worker/**/*.c  -> $(BUILD)/libstreambatch.a
#   api/proto/*.proto (protoc-c)                          -> $(BUILD)/gen/*.pb-c.[ch]
#   cmd/<binary>.c                                        -> $(BINDIR)/<binary>
#   cmd/streambatch-worker.c + worker/ops/tensor/*.cu (nvcc) -> $(BINDIR)/streambatch-worker-gpu
#   tests/unit/test_*.c (Criterion)                       -> $(BUILD)/tests/test_*
#   tests/cuda/test_*.c (Criterion, + the CUDA objects)   -> $(BUILD)/tests/test_*
#   tests/fuzz/fuzz_*.c (libFuzzer, clang)                -> $(BUILD)/fuzz/fuzz_*
# Sub-makefiles (tests/k8s/k8s.mk, ...) add targets and append to DEPS_EXTRA / TEST_EXTRA.

SHELL := /bin/bash
# Quiet by default ("CC file"); `make V=1` shows the commands.
V ?= 0
ifeq ($(V),0)
Q := @
else
Q :=
endif
.DEFAULT_GOAL := all

BUILD  ?= build
BINDIR ?= bin
SAN    ?=
CC     := gcc
CLANG  ?= clang
# `make test` builds with one compiler per core (a serial build took ~5 of a cold run's 56
# minutes); its suites still run one at a time (run-tests.sh): their time limits assume that.
NPROC  := $(shell nproc 2>/dev/null || echo 2)

PKGS := libcurl libcjson yaml-0.1 grpc libprotobuf-c libmicrohttpd libpng libjpeg zlib libzstd
PKG_CFLAGS = $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
# gRPC core and the Abseil, RE2, upb and c-ares libraries under it are linked statically (their
# .a files come with Debian's -dev packages): loading ~80 shared objects and resolving their
# symbols cost each process ~6 ms of its ~12 ms start, paid by every worker and the controller
# of every run (docs/benchmarks.md, start-to-exit overhead). OpenSSL and the rest stay shared.
GRPC_STATIC = $(filter -lgrpc -laddress_sorting -lre2 -lupb -lcares -lgpr -labsl_%,\
                $(shell pkg-config --static --libs-only-l grpc 2>/dev/null))
PKG_LIBS   = -Wl,-Bstatic $(GRPC_STATIC) -lgpr -Wl,-Bdynamic \
             $(shell pkg-config --libs $(filter-out grpc,$(PKGS)) 2>/dev/null) \
             -lssl -lcrypto -lz -lstdc++ -latomic $(CODEC_LIBS)
# Parquet page codecs (lib/parquet/encoding.c); Debian's -dev packages, installed by make deps.
# --as-needed: only the programs that read Parquet (the worker) link them.
CODEC_LIBS = -Wl,--push-state,--as-needed -lsnappy -lzstd -llz4 -lbrotlidec -Wl,--pop-state

WARN   := -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Wvla -Wno-format-truncation
CSTD   := -std=c17 -D_GNU_SOURCE
INCS   := -Ilib -I. -I$(BUILD)/gen
OPT    := -O2 -g
ifeq ($(SAN),1)
OPT    := -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined
LDSAN  := -fsanitize=address,undefined
endif
CFLAGS  := $(CSTD) $(WARN) $(OPT) $(INCS) $(PKG_CFLAGS) -MMD -MP
LDFLAGS := $(LDSAN)
# OpenBLAS (tensor.mlp's CPU GEMMs; Debian's serial variant, libopenblas-serial-dev: one thread
# per call), only where a program uses it: --as-needed keeps it off the controller's NEEDED list.
BLAS_LIBS = -Wl,--push-state,--as-needed -lopenblas -Wl,--pop-state
LDLIBS   = $(PKG_LIBS) $(BLAS_LIBS) -lpthread -lm

PROTOS    := $(wildcard api/proto/*.proto)
GEN_SRCS  := $(patsubst api/proto/%.proto,$(BUILD)/gen/%.pb-c.c,$(PROTOS))
GEN_HDRS  := $(GEN_SRCS:.c=.h)
LIB_SRCS  := $(wildcard lib/*/*.c controller/*.c controller/*/*.c controller/*/*/*.c worker/*.c \
               worker/*/*.c worker/*/*/*.c)
LIB_OBJS  := $(patsubst %.c,$(BUILD)/obj/%.o,$(LIB_SRCS)) $(GEN_SRCS:.c=.o)
LIBSB     := $(BUILD)/libstreambatch.a
BINS      := $(patsubst cmd/%.c,$(BINDIR)/%,$(wildcard cmd/*.c))
TEST_SRCS := $(wildcard tests/unit/test_*.c)
TEST_BINS := $(patsubst tests/unit/%.c,$(BUILD)/tests/%,$(TEST_SRCS))
# Integration tests (real processes, local mode): run one test at a time.
ITEST_BINS := $(patsubst tests/integration/%.c,$(BUILD)/itests/%,$(wildcard tests/integration/test_*.c))
FUZZ_SRCS := $(wildcard tests/fuzz/fuzz_*.c)
# Helper programs the tests start as real processes, and benchmark programs.
HELPER_BINS := $(patsubst tests/helpers/%.c,$(BUILD)/tests/helpers/%,$(wildcard tests/helpers/*.c))
# Plugins (api/plugin/streambatch_plugin.h): the examples and the tests' own, as shared objects.
PLUGINS   := $(patsubst %.c,$(BUILD)/plugins/lib%.so,$(notdir $(wildcard examples/plugins/*.c tests/plugins/*.c)))
BENCH_BINS  := $(patsubst tests/bench/%.c,$(BUILD)/bench/%,$(wildcard tests/bench/bench_*.c))
FUZZ_SECONDS ?= 10

# The CUDA build (docs/architecture.md, "The CUDA build"): nvcc and the static CUDA runtime from
# the pinned PyPI wheels that `make deps` caches (scripts/deps.sh); no GPU is needed to build.
# SASS for A100 (sm_80) and H100 (sm_90), and PTX of compute_80 for the GPUs in between and after.
CUDA_HOME ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/streambatch/cuda-13.5.37/nvidia/cu13
NVCC      := $(CUDA_HOME)/bin/nvcc
CUDA_ARCH := -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 \
             -gencode arch=compute_80,code=compute_80
NVCCFLAGS := -ccbin $(CC) -std=c++17 -O2 $(CUDA_ARCH) -Xcompiler -fPIC,-Wall,-Wextra,-Werror \
             $(INCS) -MMD -MP
CUDA_OBJS := $(patsubst %.cu,$(BUILD)/obj/%.cu.o,$(wildcard worker/ops/tensor/*.cu))
# cuBLASLt (tensor.mlp's GEMMs; its wheel has no static library) is opened with dlopen on first
# use (mlp_cuda.cu: loading it costs a process ~160 MiB), found as a link would find it:
# LD_LIBRARY_PATH first (scripts/device-*.sh point it at the GPU machine's own copy, torch's
# nvidia-cublas wheel), then RUNPATH $$ORIGIN/../lib/streambatch (where the worker-gpu image puts
# it, beside /usr/local/bin), then the wheel's folder here.
CUDA_LIBS := -L$(CUDA_HOME)/lib -l:libcudart_static.a -lstdc++ -ldl -lpthread -lrt \
             -Wl,--enable-new-dtags,-rpath,'$$ORIGIN/../lib/streambatch',-rpath,$(CUDA_HOME)/lib
GPU_BINS  := $(BINDIR)/streambatch-worker-gpu
CUDA_TEST_BINS := $(patsubst tests/cuda/%.c,$(BUILD)/tests/%,$(wildcard tests/cuda/test_*.c))

# The C consumer of a stream:// sink (api/consumer/streambatch_consumer.h) as a shared library,
# for trainers and for the Python kit's ctypes wrapper (streambatch.iter_batches): its objects
# are compiled again with -fPIC (the static library's are not), and gRPC is linked shared (the
# static gRPC/RE2 archives are not position-independent).
CONSUMER_SRCS := api/consumer/consumer.c worker/data/fetch.c \
                 $(wildcard lib/core/*.c lib/rpc/*.c lib/partition/*.c)
CONSUMER_OBJS := $(patsubst %.c,$(BUILD)/pic/%.o,$(CONSUMER_SRCS)) \
                 $(BUILD)/pic/gen/streambatch.pb-c.o
CONSUMER_LIB  := $(BUILD)/lib/libstreambatch_consumer.so
CONSUMER_EXAMPLE := $(BUILD)/lib/stream-count

DEPS_EXTRA :=
TEST_EXTRA :=
BUILD_EXTRA :=
-include tests/k8s/k8s.mk

# `make images`: the controller, worker and worker-gpu images (OCI layout + docker archives in
# build/images) without a Docker daemon; `make images-test` checks them (part of `make test`).
.PHONY: images images-test dashboard-test sdk-test embed-test example-embeddings example-images \
  image-test
images: deps build
	@scripts/images.sh
images-test: build
	@tests/images/test-images.sh
TEST_EXTRA += images-test dashboard-test sdk-test embed-test image-test
# The layering check of `make lint` catches a wrong include (tests/lint/test-layers.sh).
.PHONY: layers-test
TEST_EXTRA += layers-test
# `make test` runs `make lint` too: a formatting slip or a cppcheck finding fails the run, as it
# would not before (4d68899 left lint failing and passed CI).
TEST_EXTRA += lint
layers-test:
	@tests/lint/test-layers.sh
# The Grafana dashboard against Grafana's schema and a real Prometheus (tests/dashboard/).
dashboard-test: build
	@SB_BIN_DIR=$(abspath $(BINDIR)) tests/dashboard/test-dashboard.sh
# The Python UDF kit (sdk/python) pip-installed into a venv, driving exec stages (tests/sdk/).
sdk-test: build $(BUILD)/tests/helpers/sb_arrow_ipc
	@SB_BIN_DIR=$(abspath $(BINDIR)) SB_BUILD_DIR=$(abspath $(BUILD)) tests/sdk/test-python-kit.sh
# Batch inference with a real model (all-MiniLM-L6-v2 from PyPI) through exec: the example, and
# the test that checks its vectors against the model called directly.
example-embeddings: build
	@SB_BIN_DIR=$(abspath $(BINDIR)) scripts/example-embeddings.sh
embed-test: build
	@SB_BIN_DIR=$(abspath $(BINDIR)) scripts/example-embeddings.sh --check && \
	  echo "embed-test: 1 passed, 0 failed" || { echo "embed-test: 0 passed, 1 failed"; false; }
# Image classification (image source, image.resize/normalize, tensor.mlp on a GPU stage) on
# scikit-learn's handwritten digits with a model trained by the test: the example and its check.
example-images: build
	@SB_BIN_DIR=$(abspath $(BINDIR)) scripts/example-images.sh
# A PyTorch CNN (numpy where torch is absent) through the Python kit in an exec stage on a GPU
# pool (api/examples/cnn-classify.yaml): the example, and its check against a numpy reference.
.PHONY: example-cnn cnn-test
TEST_EXTRA += cnn-test
example-cnn: build
	@SB_BIN_DIR=$(abspath $(BINDIR)) scripts/example-cnn.sh
cnn-test: build
	@SB_BIN_DIR=$(abspath $(BINDIR)) scripts/example-cnn.sh --check && \
	  echo "cnn-test: 1 passed, 0 failed" || { echo "cnn-test: 0 passed, 1 failed"; false; }
image-test: build
	@SB_BIN_DIR=$(abspath $(BINDIR)) scripts/example-images.sh --check && \
	  echo "image-test: 1 passed, 0 failed" || { echo "image-test: 0 passed, 1 failed"; false; }
# image.resize's antialiased resize against Pillow's BILINEAR (tests/images/test-resize.sh).
.PHONY: resize-test
TEST_EXTRA += resize-test
resize-test: $(BUILD)/tests/helpers/sb_resize
	@SB_BUILD_DIR=$(abspath $(BUILD)) tests/images/test-resize.sh

# The stream:// sink served by `run --serve` to trainer ranks reading it with the Python kit's
# iter_batches over the C consumer library (tests/stream/).
.PHONY: stream-test
TEST_EXTRA += stream-test
stream-test: $(BINDIR)/streambatch $(BINDIR)/streambatch-worker $(CONSUMER_LIB) $(CONSUMER_EXAMPLE)
	@SB_BIN_DIR=$(abspath $(BINDIR)) SB_BUILD_DIR=$(abspath $(BUILD)) tests/stream/test-stream.sh

# The Parquet source against files written by pyarrow and DuckDB (PyPI, cached venv), refused
# types and hostile files (tests/parquet/).
.PHONY: parquet-test
TEST_EXTRA += parquet-test
parquet-test: $(BINDIR)/streambatch $(BINDIR)/streambatch-worker
	@SB_BIN_DIR=$(abspath $(BINDIR)) tests/parquet/test-parquet.sh

# Chaos run (docs/testing.md, "Chaos run"): random pipelines back to back under random faults
# (workers killed and stopped, `streambatch run` killed and resumed, spill disk full, link cuts
# and loss), every output row checked against an independent computation. `make chaos
# DURATION=1800` for a long run; `chaos-test` (3 minutes) is part of `make test`.
DURATION ?= 1800
CHAOS_TEST_DURATION ?= 180
.PHONY: chaos chaos-test
CHAOS_DEPS = $(BINDIR)/streambatch $(BINDIR)/streambatch-worker $(BUILD)/tests/helpers/sb_netem
chaos: $(CHAOS_DEPS)
	@SB_BIN_DIR=$(abspath $(BINDIR)) SB_BUILD_DIR=$(abspath $(BUILD)) scripts/chaos.sh $(DURATION)
chaos-test: $(CHAOS_DEPS)
	@SB_BIN_DIR=$(abspath $(BINDIR)) SB_BUILD_DIR=$(abspath $(BUILD)) scripts/chaos.sh $(CHAOS_TEST_DURATION)
TEST_EXTRA += chaos-test
# the same with ASan+UBSan binaries (build/asan); any sanitizer report fails the pipeline
.PHONY: chaos-asan
chaos-asan:
	@$(MAKE) --no-print-directory BUILD=build/asan BINDIR=build/asan/bin SAN=1 chaos DURATION=$(DURATION)

.SECONDARY:
.PHONY: all deps build test check tests-build sanitize lint fuzz fuzz-build fuzz-smoke run bench bench-peers valgrind clean
all: build
build: $(BINS) $(GPU_BINS) $(CONSUMER_LIB)

$(BUILD)/pic/gen/%.o: $(BUILD)/gen/%.c
	@mkdir -p $(dir $@)
	@echo "  CC     $< (PIC)"
	$(Q)$(CC) $(CSTD) $(OPT) -fPIC $(INCS) $(PKG_CFLAGS) -c $< -o $@
$(BUILD)/pic/%.o: %.c | $(GEN_HDRS)
	@mkdir -p $(dir $@)
	@echo "  CC     $< (PIC)"
	$(Q)$(CC) $(CFLAGS) -fPIC -c $< -o $@
$(CONSUMER_LIB): $(CONSUMER_OBJS)
	@mkdir -p $(dir $@)
	@echo "  LD     $@"
	$(Q)$(CC) $(LDFLAGS) -shared -Wl,--no-undefined -Wl,-soname,libstreambatch_consumer.so -o $@ $^ \
	  $(shell pkg-config --libs grpc libprotobuf-c libcjson zlib 2>/dev/null) -lssl -lcrypto \
	  -lpthread -lm
.PHONY: consumer
consumer: $(CONSUMER_LIB) $(CONSUMER_EXAMPLE)
# A read loop in C over the library (api/examples/consumer/count.c; stream-test runs it).
$(CONSUMER_EXAMPLE): api/examples/consumer/count.c api/consumer/streambatch_consumer.h $(CONSUMER_LIB)
	@mkdir -p $(dir $@)
	@echo "  LD     $@"
	$(Q)$(CC) $(CSTD) $(WARN) $(OPT) -I. $< -o $@ -L$(BUILD)/lib -lstreambatch_consumer \
	  -Wl,-rpath,'$$ORIGIN'

deps:
	@scripts/deps.sh
	@$(if $(DEPS_EXTRA),$(MAKE) --no-print-directory $(DEPS_EXTRA))

$(BUILD)/gen/%.pb-c.c $(BUILD)/gen/%.pb-c.h: api/proto/%.proto
	@mkdir -p $(BUILD)/gen
	@echo "  PROTOC $<"
	$(Q)protoc-c --c_out=$(BUILD)/gen -Iapi/proto $<

$(BUILD)/gen/%.pb-c.o: $(BUILD)/gen/%.pb-c.c
	@echo "  CC     $<"
	$(Q)$(CC) $(CSTD) $(OPT) $(INCS) $(PKG_CFLAGS) -c $< -o $@

$(BUILD)/obj/%.o: %.c | $(GEN_HDRS)
	@mkdir -p $(dir $@)
	@echo "  CC     $<"
	$(Q)$(CC) $(CFLAGS) -c $< -o $@

# The archive is rebuilt whenever the set of objects changes (not only when one is newer), and
# is a thin archive: members keep their paths, so lib/rpc/chunk.o and lib/partition/chunk.o
# cannot replace each other.
$(BUILD)/lib.objs: FORCE
	@mkdir -p $(BUILD)
	@echo '$(LIB_OBJS)' | cmp -s - $@ || echo '$(LIB_OBJS)' > $@
$(LIBSB): $(LIB_OBJS) $(BUILD)/lib.objs
	@rm -f $@
	@echo "  AR     $@"
	$(Q)ar rcsT $@ $(LIB_OBJS)
FORCE:

# Every program (binaries, tests, helpers, benchmarks) links the same way: its prerequisites
# (objects and the archive), then the libraries; $(call LINK,MORE) appends MORE libraries (the
# CUDA runtime, Criterion), which must come after the archive that references them.
define LINK
@mkdir -p $(@D)
@echo "  LD     $@"
$(Q)$(CC) $(LDFLAGS) $^ -o $@ $(LDLIBS) $(1)
endef

$(BINDIR)/%: $(BUILD)/obj/cmd/%.o $(LIBSB)
	$(call LINK)

$(BUILD)/obj/%.cu.o: %.cu
	@mkdir -p $(dir $@)
	@test -x $(NVCC) || { echo "nvcc not found at $(NVCC): run make deps (or set CUDA_HOME)"; exit 1; }
	@echo "  NVCC   $<"
	$(Q)$(NVCC) $(NVCCFLAGS) -c $< -o $@

# The worker with the CUDA implementations: the same main and archive, plus the CUDA objects,
# whose strong definitions replace the archive's weak references (worker/ops/tensor/mlp_cuda.h).
$(GPU_BINS): $(BUILD)/obj/cmd/streambatch-worker.o $(CUDA_OBJS) $(LIBSB)
	$(call LINK,$(CUDA_LIBS))

$(CUDA_TEST_BINS): $(BUILD)/tests/%: $(BUILD)/obj/tests/cuda/%.o $(CUDA_OBJS) $(LIBSB)
	$(call LINK,$(CUDA_LIBS) -lcriterion)

$(BUILD)/tests/%: $(BUILD)/obj/tests/unit/%.o $(LIBSB)
	$(call LINK,-lcriterion)

$(BUILD)/tests/helpers/%: $(BUILD)/obj/tests/helpers/%.o $(LIBSB)
	$(call LINK)

# tensor.mlp's benchmark with the CUDA objects (scripts/device-cuda.sh runs it on a GPU machine).
$(BUILD)/bench/bench_mlp_gpu: $(BUILD)/obj/tests/bench/bench_mlp.o $(CUDA_OBJS) $(LIBSB)
	$(call LINK,$(CUDA_LIBS))

$(BUILD)/bench/%: $(BUILD)/obj/tests/bench/%.o $(LIBSB)
	$(call LINK)

$(BUILD)/itests/%: $(BUILD)/obj/tests/integration/%.o $(LIBSB)
	$(call LINK,-lcriterion)

tests-build: $(BINS) $(GPU_BINS) $(TEST_BINS) $(CUDA_TEST_BINS) $(HELPER_BINS) $(ITEST_BINS) $(PLUGINS) \
             $(CONSUMER_LIB) \
             $(BUILD)/bench/bench_mlp_gpu

$(BUILD)/plugins/lib%.so: examples/plugins/%.c api/plugin/streambatch_plugin.h
	@mkdir -p $(dir $@)
	@echo "  PLUGIN $@"
	$(Q)$(CC) $(CSTD) -O2 -Wall -Wextra -Werror -fPIC -shared -Iapi/plugin $< -o $@
$(BUILD)/plugins/lib%.so: tests/plugins/%.c api/plugin/streambatch_plugin.h
	@mkdir -p $(dir $@)
	@echo "  PLUGIN $@"
	$(Q)$(CC) $(CSTD) -O2 -Wall -Wextra -Werror -fPIC -shared -Iapi/plugin $< -o $@

# Runs every suite and prints one closing line: "N passed, N failed".
check: tests-build
	@SB_BIN_DIR=$(abspath $(BINDIR)) SB_BUILD_DIR=$(abspath $(BUILD)) SAN=$(SAN) \
	  scripts/run-tests.sh $(TEST_BINS) $(CUDA_TEST_BINS) $(ITEST_BINS) -- $(TEST_EXTRA)

# `make test`: the unit and CLI suites, then the slower suites (fuzz smoke run, valgrind on the
# validate tests, and whatever sub-makefiles add to TEST_EXTRA), each counted in the summary.
test: deps
	@$(MAKE) --no-print-directory -j$(NPROC) build tests-build
	@$(if $(BUILD_EXTRA),$(MAKE) --no-print-directory $(BUILD_EXTRA))
	@$(MAKE) --no-print-directory check TEST_EXTRA="fuzz-smoke valgrind $(TEST_EXTRA)"

fuzz-smoke:
	@$(MAKE) --no-print-directory -j$(NPROC) fuzz-build
	@scripts/fuzz.sh $(BUILD)/fuzz 5 $(NPROC)

sanitize: deps
	@$(MAKE) --no-print-directory BUILD=build/asan BINDIR=build/asan/bin SAN=1 check

valgrind: build
	@scripts/valgrind-validate.sh $(BINDIR)/streambatch

lint:
	@scripts/lint.sh

FUZZ_OBJS := $(patsubst %.c,$(BUILD)/fuzz/obj/%.o,$(LIB_SRCS)) $(patsubst %.c,$(BUILD)/fuzz/obj/%.o,$(GEN_SRCS))
FUZZ_FLAGS := $(CSTD) -g -O1 $(INCS) $(PKG_CFLAGS) -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined -MMD -MP
$(BUILD)/fuzz/obj/%.o: %.c | $(GEN_HDRS)
	@mkdir -p $(dir $@)
	@echo "  CLANG  $<"
	$(Q)$(CLANG) $(FUZZ_FLAGS) -c $< -o $@
$(BUILD)/fuzz/fuzz_%: tests/fuzz/fuzz_%.c $(FUZZ_OBJS)
	@mkdir -p $(dir $@)
	@echo "  LD     $@"
	$(Q)$(CLANG) $(FUZZ_FLAGS) -fsanitize=fuzzer $(filter %.c %.o,$^) -o $@ $(LDLIBS)
fuzz-build: $(patsubst tests/fuzz/%.c,$(BUILD)/fuzz/%,$(FUZZ_SRCS))
fuzz: fuzz-build
	@scripts/fuzz.sh $(BUILD)/fuzz $(FUZZ_SECONDS)

# `make bench`: runs every benchmark (~30 min) and writes the report to build/bench.md
# (SB_BENCH_OUT=FILE elsewhere); docs/benchmarks.md takes its tables from such reports.
bench: deps
	@$(MAKE) --no-print-directory build $(BENCH_BINS) $(HELPER_BINS)
	@SB_BIN_DIR=$(abspath $(BINDIR)) SB_BUILD_DIR=$(abspath $(BUILD)) scripts/bench.sh

# `make bench-peers`: streambatch, Ray Data and Daft side by side (scripts/bench-peers.sh; the
# peers go into venvs under ~/.cache/streambatch, benchmark only); replaces its section of
# docs/benchmarks.md. ROUNDS=N, SIZE=quick for a short run. Takes ~15 min at full size.
bench-peers: deps
	@$(MAKE) --no-print-directory build
	@SB_BIN_DIR=$(abspath $(BINDIR)) scripts/bench-peers.sh >$(BUILD)/bench-peers.md
	@python3 tests/bench/peers/splice.py docs/benchmarks.md $(BUILD)/bench-peers.md
	@cat $(BUILD)/bench-peers.md

run: deps
	@$(MAKE) --no-print-directory build
	@scripts/run-example.sh

clean:
	rm -rf build bin

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)
-include $(shell find $(BUILD)/pic -name '*.d' 2>/dev/null)
-include $(shell find $(BUILD)/fuzz -name '*.d' 2>/dev/null)
