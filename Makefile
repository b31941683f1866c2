# Makefile — build, test, run and profile the notebook. `make help` lists the targets.
#
# Variables you may set:
#   ARCH=sm_90a       GPU architecture (default: sm_90a + compute_90 PTX on a Hopper GPU or without a
#                     GPU, native on any other GPU; GEMM step 9 needs sm_90a)
#   DEBUG=1           -G -O0 device code, synchronize after every launch (NB_DEBUG_SYNC)
#   CI=true           warnings are errors
#   DATA_SRC=dir      where `make data` copies the IDX files from (default ../shared/data)
#   DEPS_PREFIX=dir   extra include/ and lib/ for doctest, nlohmann-json, zlib (machines without apt)
#   PYTHON=python3    interpreter for the PyTorch twins (needs torch); the report uses .venv
SHELL := /bin/bash
.DEFAULT_GOAL := all

CUDA_HOME ?= /usr/local/cuda
NVCC ?= $(CUDA_HOME)/bin/nvcc
CXX ?= g++
PYTHON ?= python3
BUILD := build
DATA_SRC ?= ../shared/data
DEPS_PREFIX ?=

HAVE_GPU := $(shell nvidia-smi -L >/dev/null 2>&1 && echo 1)
GPU_CC := $(if $(HAVE_GPU),$(shell nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n 1 | tr -d ' .'))
# Hopper builds sm_90a device code (its architecture-specific instructions: wgmma, GEMM step 9) with
# compute_90 PTX beside it; NB_HAVE_WGMMA tells the host code that step 9 exists.
HOPPER_GENCODE := -gencode arch=compute_90a,code=sm_90a -gencode arch=compute_90,code=compute_90 -DNB_HAVE_WGMMA
ifdef ARCH
  GENCODE := -arch=$(ARCH) $(if $(filter sm_90a,$(ARCH)),-DNB_HAVE_WGMMA)
else ifeq ($(HAVE_GPU),1)
  GENCODE := $(if $(filter 90,$(GPU_CC)),$(HOPPER_GENCODE),-arch=native)
else
  GENCODE := $(HOPPER_GENCODE)
endif

CUPTI_INC := $(wildcard $(CUDA_HOME)/extras/CUPTI/include)
CUPTI_LIB := $(wildcard $(CUDA_HOME)/extras/CUPTI/lib64)
INCLUDES := -Icommon -I$(CUDA_HOME)/include $(addprefix -I,$(CUPTI_INC)) \
            $(if $(DEPS_PREFIX),-I$(DEPS_PREFIX)/include)
LIBDIRS := -L$(CUDA_HOME)/lib64 $(addprefix -L,$(CUPTI_LIB)) $(if $(DEPS_PREFIX),-L$(DEPS_PREFIX)/lib)
RPATH := -Xlinker -rpath=$(CUDA_HOME)/lib64 $(addprefix -Xlinker -rpath=,$(CUPTI_LIB))

comma := ,
space := $(empty) $(empty)
WARN := -Wall -Wextra
NVCC_WERROR :=
ifeq ($(CI),true)
  WARN += -Werror
  NVCC_WERROR := -Werror all-warnings
endif
ifeq ($(DEBUG),1)
  OPT := -O0 -g
  NVOPT := -O0 -g -G -DNB_DEBUG_SYNC
else
  OPT := -O2
  NVOPT := -O3 -lineinfo
endif

CXXFLAGS := -std=c++17 $(OPT) $(WARN) $(INCLUDES) -MMD -MP
NVCCFLAGS := -std=c++17 $(NVOPT) $(GENCODE) $(INCLUDES) -Xcompiler "$(subst $(space),$(comma),$(WARN))" \
             $(NVCC_WERROR) --expt-relaxed-constexpr -MMD -MP
LDLIBS := -lcurand -lcupti -lcublasLt -lcublas -lz

# ---------------------------------------------------------------- dependency check
# One line naming the package when a header is missing (run once per make invocation).
DEPS_OK := $(BUILD)/.deps-ok
$(DEPS_OK): Makefile
	@mkdir -p $(BUILD)
	@chk() { printf '#include <%s>\n' "$$1" | $(CXX) -E -x c++ $(INCLUDES) - >/dev/null 2>&1 || \
	  { echo "missing dependency: $$2 (header <$$1>); install it, e.g. apt-get install $$3"; exit 1; }; }; \
	chk doctest/doctest.h doctest doctest-dev && \
	chk nlohmann/json.hpp nlohmann-json nlohmann-json3-dev && \
	chk zlib.h zlib zlib1g-dev && \
	chk cupti.h "CUPTI headers (CUDA toolkit)" cuda-cupti-dev-13-0 && \
	chk nvtx3/nvToolsExt.h "NVTX3 headers (CUDA toolkit)" cuda-nvtx-13-0 && \
	{ command -v $(NVCC) >/dev/null || { echo "missing dependency: nvcc (CUDA toolkit) at $(NVCC); set CUDA_HOME"; exit 1; }; } && \
	touch $@
.PHONY: deps
deps: $(DEPS_OK)

# ---------------------------------------------------------------- common layer
COMMON_CPP := $(wildcard common/*.cpp)
COMMON_CU := $(wildcard common/*.cu)
COMMON_HOST_OBJ := $(COMMON_CPP:%.cpp=$(BUILD)/%.o)
COMMON_CU_OBJ := $(COMMON_CU:%.cu=$(BUILD)/%.o)
LIB_HOST := $(BUILD)/libnb_host.a
LIB_CUDA := $(BUILD)/libnb_cuda.a

$(BUILD)/%.o: %.cpp | $(DEPS_OK)
	@mkdir -p $(@D)
	$(CXX) $(CXXFLAGS) -c $< -o $@
$(BUILD)/%.o: %.cu | $(DEPS_OK)
	@mkdir -p $(@D)
	$(NVCC) $(NVCCFLAGS) -c $< -o $@
$(LIB_HOST): $(COMMON_HOST_OBJ)
	@rm -f $@; ar rcs $@ $^
$(LIB_CUDA): $(COMMON_CU_OBJ)
	@rm -f $@; ar rcs $@ $^

# ---------------------------------------------------------------- phases (generic rule)
PHASE_DIRS := phase1_naive phase2_shared_mem phase3_fused_streams phase4_mlp phase5_batched
PHASES := $(foreach d,$(PHASE_DIRS),$(if $(wildcard $(d)/*.cu),$(d)))

# Phase objects live under build/obj/ (build/phaseN_xxx is the executable itself).
$(BUILD)/obj/%.o: %.cpp | $(DEPS_OK)
	@mkdir -p $(@D)
	$(CXX) $(CXXFLAGS) -c $< -o $@
$(BUILD)/obj/%.o: %.cu | $(DEPS_OK)
	@mkdir -p $(@D)
	$(NVCC) $(NVCCFLAGS) -c $< -o $@
define PHASE_template
$(1)_OBJ := $$(patsubst %.cu,$(BUILD)/obj/%.o,$$(wildcard $(1)/*.cu)) $$(patsubst %.cpp,$(BUILD)/obj/%.o,$$(wildcard $(1)/*.cpp))
$(BUILD)/$(1): $$($(1)_OBJ) $(LIB_CUDA) $(LIB_HOST)
	$(NVCC) $(GENCODE) -o $$@ $$($(1)_OBJ) $(LIB_CUDA) $(LIB_HOST) $(LIBDIRS) $(RPATH) $(LDLIBS)
endef
$(foreach d,$(PHASES),$(eval $(call PHASE_template,$(d))))

# The MLP phases' objects alone (no library, no link): make run's quick notebook compiles them in the
# background while the libraries and phases 1-3 build (scripts/run_all.sh).
.PHONY: mlp-objects
mlp-objects: $(phase4_mlp_OBJ) $(phase5_batched_OBJ)

.PHONY: all phase1 phase2 phase3 phase4 phase5
all: $(PHASES:%=$(BUILD)/%)
phase1: $(BUILD)/phase1_naive
phase2: $(BUILD)/phase2_shared_mem
phase3: $(BUILD)/phase3_fused_streams
phase4: $(BUILD)/phase4_mlp
phase5: $(BUILD)/phase5_batched

# ---------------------------------------------------------------- phase 5's one-launch rungs alone
## phase5-rung: build/phase5_rung, one rung of phase 5 (5c, 5d, 5e, 5f, 5g) alone through its public entry points, checked against float64 and timed
# phase5_batched/dev/rung.cu links the rungs' own translation units (not main.cu, not the trainer); it
# finds their headers with -Iphase5_batched.
P5_RUNG_OBJ := $(BUILD)/obj/phase5_batched/dev/rung.o \
               $(patsubst %,$(BUILD)/obj/phase5_batched/%.o,5c_persistent 5d_cluster 5e_pipelined 5f_cluster32 5g_grid)
$(BUILD)/obj/phase5_batched/dev/rung.o: NVCCFLAGS += -Iphase5_batched
$(BUILD)/phase5_rung: $(P5_RUNG_OBJ) $(LIB_CUDA) $(LIB_HOST)
	$(NVCC) $(GENCODE) -o $@ $(P5_RUNG_OBJ) $(LIB_CUDA) $(LIB_HOST) $(LIBDIRS) $(RPATH) $(LDLIBS)
.PHONY: phase5-rung
phase5-rung: $(BUILD)/phase5_rung
all: $(BUILD)/phase5_rung

# ---------------------------------------------------------------- tools (one .cu each)
TOOLS := $(patsubst tools/%.cu,$(BUILD)/tools/%,$(wildcard tools/*.cu))
# A tool's object is an intermediate of the pattern rules below: without this, make deletes it after
# linking, and the next make (bench_linreg.sh's, after make run's build) compiles every tool again.
.SECONDARY: $(TOOLS:=.o)
$(BUILD)/tools/%: $(BUILD)/tools/%.o $(LIB_CUDA) $(LIB_HOST)
	$(NVCC) $(GENCODE) -o $@ $< $(LIB_CUDA) $(LIB_HOST) $(LIBDIRS) $(RPATH) $(LDLIBS)
.PHONY: tools
tools: $(TOOLS)
all: $(TOOLS)

# ---------------------------------------------------------------- tests
HOST_TEST_SRC := $(wildcard tests/host/*.cpp)
HOST_TEST_OBJ := $(HOST_TEST_SRC:%.cpp=$(BUILD)/%.o)
HOST_TESTS := $(BUILD)/tests/host_tests
$(HOST_TESTS): $(HOST_TEST_OBJ) $(LIB_HOST)
	$(CXX) -o $@ $(HOST_TEST_OBJ) $(LIB_HOST) $(LIBDIRS) -lz

GPU_TEST_SRC := $(wildcard tests/gpu/*.cu) $(wildcard tests/gpu/*.cpp)
GPU_TEST_OBJ := $(patsubst %.cu,$(BUILD)/%.o,$(patsubst %.cpp,$(BUILD)/%.o,$(GPU_TEST_SRC)))
GPU_TESTS := $(BUILD)/tests/gpu_tests
$(GPU_TESTS): $(GPU_TEST_OBJ) $(LIB_CUDA) $(LIB_HOST)
	$(NVCC) $(GENCODE) -o $@ $(GPU_TEST_OBJ) $(LIB_CUDA) $(LIB_HOST) $(LIBDIRS) $(RPATH) $(LDLIBS)

VENV := .venv
VENV_PY := $(VENV)/bin/python
$(VENV_PY): report/requirements.txt
	@command -v python3 >/dev/null || { echo "missing dependency: python3 (apt-get install python3 python3-venv)"; exit 1; }
	python3 -m venv $(VENV) || { echo "missing dependency: python3 venv module (apt-get install python3-venv)"; exit 1; }
	$(VENV)/bin/pip install -q --disable-pip-version-check -r report/requirements.txt || { rm -rf $(VENV); echo "make venv: pip could not install report/requirements.txt (no network?)"; exit 1; }
	@touch $@
.PHONY: venv
venv: $(VENV_PY)

.PHONY: test test-host test-python build-cuda test-gpu test-gpu-repeat
## test: host doctest suite, every .cu compiled, pytest (twins and report); no GPU needed
## (the build runs with $(NPROC) parallel jobs unless -j is given)
NPROC := $(shell nproc 2>/dev/null || echo 2)
TEST_JOBS = $(if $(filter -j%,$(MAKEFLAGS))$(findstring j,$(filter-out -%,$(firstword $(MAKEFLAGS)))),,-j$(NPROC))
test:
	@$(MAKE) --no-print-directory $(TEST_JOBS) $(HOST_TESTS) all $(GPU_TESTS)
	@$(MAKE) --no-print-directory test-host build-cuda test-libtorch test-python
test-host: $(HOST_TESTS)
	DATA_DIR=$(DATA_SRC) $(HOST_TESTS)
build-cuda: all $(GPU_TESTS)
test-python: $(VENV_PY)
	$(VENV_PY) -m pytest -q tests/python
## test-gpu: GPU doctest cases, then the same under compute-sanitizer memcheck; needs a GPU
test-gpu: $(GPU_TESTS)
	$(GPU_TESTS)
	compute-sanitizer --tool memcheck --error-exitcode 99 $(GPU_TESTS)
## test-gpu-repeat [N=200] [TC=pattern] [LANES=1]: the GPU test cases matching TC (default phase 5's) N times in a row, LANES processes side by side, stopping at the first failure; needs a GPU
test-gpu-repeat: $(GPU_TESTS)
	LANES="$(or $(LANES),1)" bash scripts/test_gpu_repeat.sh "$(or $(N),200)" $(if $(TC),"$(TC)")

# ---------------------------------------------------------------- libtorch twins (baselines/libtorch)
# Built against the libtorch inside the torch package that $(PYTHON) imports (its include/ and lib/,
# _GLIBCXX_USE_CXX11_ABI as torch._C says). Where torch is not importable `make libtorch` prints one
# line saying so and succeeds. Not part of `all`; `make test` runs it (test-libtorch), so CI builds
# the twins where torch is importable and prints the one skip line elsewhere.
# LIBTORCH_LDFLAGS: extra link flags (e.g. -Wl,--allow-shlib-undefined to link-check on a machine
# without the CUDA libraries torch_cuda needs).
LIBTORCH_LDFLAGS ?=
LT_BUILD := $(BUILD)/libtorch
LT_COMMON := cli errors record stats npy idx reference device_info_host device_query
LT_COMMON_OBJ := $(LT_COMMON:%=$(LT_BUILD)/common/%.o)
LT_BINS := $(BUILD)/libtorch_linreg $(BUILD)/libtorch_mlp
LT_CXXFLAGS = -std=c++17 $(OPT) $(WARN) -Icommon -Ibaselines/libtorch -isystem $(TORCH_DIR)/include \
              -isystem $(TORCH_DIR)/include/torch/csrc/api/include -isystem $(CUDA_HOME)/include \
              $(if $(DEPS_PREFIX),-I$(DEPS_PREFIX)/include) -D_GLIBCXX_USE_CXX11_ABI=$(TORCH_ABI) -MMD -MP
LT_LDFLAGS = -L$(TORCH_DIR)/lib -Wl,-rpath,$(TORCH_DIR)/lib -Wl,--no-as-needed -ltorch -ltorch_cpu -ltorch_cuda \
             -lc10 -lc10_cuda -Wl,--as-needed -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcudart \
             $(if $(DEPS_PREFIX),-L$(DEPS_PREFIX)/lib) -lz $(LIBTORCH_LDFLAGS)
.PHONY: libtorch libtorch-build test-libtorch
## libtorch: build/libtorch_linreg and build/libtorch_mlp, the libtorch twins (where torch is importable)
libtorch:
	@info=$$($(PYTHON) -c 'import os, torch; print(os.path.dirname(torch.__file__)); print(int(torch._C._GLIBCXX_USE_CXX11_ABI))' 2>/dev/null) \
	  || { echo "libtorch twins not built: torch is not importable by $(PYTHON)"; exit 0; }; \
	dir=$$(printf '%s\n' "$$info" | tail -n 2 | head -n 1); abi=$$(printf '%s\n' "$$info" | tail -n 1); \
	[ -f "$$dir/include/ATen/cuda/CUDAGraph.h" ] && [ -f "$$dir/lib/libtorch_cuda.so" ] \
	  || { echo "libtorch twins not built: the torch at $$dir has no CUDA headers or libtorch_cuda.so (a CPU-only build)"; exit 0; }; \
	$(MAKE) --no-print-directory libtorch-build TORCH_DIR="$$dir" TORCH_ABI="$$abi"
test-libtorch:
	@$(MAKE) --no-print-directory libtorch
libtorch-build: $(LT_BINS)
.SECONDARY: $(LT_COMMON_OBJ) $(LT_BUILD)/linreg.o $(LT_BUILD)/mlp.o
# The flags the objects were built with (another torch or ABI rebuilds them).
$(LT_BUILD)/flags: FORCE
	@mkdir -p $(@D); echo '$(LT_CXXFLAGS)' | cmp -s - $@ || echo '$(LT_CXXFLAGS)' > $@
$(LT_BUILD)/common/%.o: common/%.cpp $(LT_BUILD)/flags
	@mkdir -p $(@D)
	$(CXX) $(LT_CXXFLAGS) -c $< -o $@
$(LT_BUILD)/%.o: baselines/libtorch/%.cpp $(LT_BUILD)/flags
	@mkdir -p $(@D)
	$(CXX) $(LT_CXXFLAGS) -c $< -o $@
$(BUILD)/libtorch_%: $(LT_BUILD)/%.o $(LT_COMMON_OBJ)
	$(CXX) -o $@ $(LT_BUILD)/$*.o $(LT_COMMON_OBJ) $(LT_LDFLAGS)
.PHONY: FORCE
FORCE:

# ---------------------------------------------------------------- hardening (scripts/harden.sh)
.PHONY: test-asan fuzz sanitize
## test-asan: the host suite built and run with -fsanitize=address,undefined
test-asan:
	bash scripts/harden.sh asan
## fuzz [FUZZ_SECONDS=60]: libFuzzer on the IDX reader and the CLI parser (clang)
fuzz:
	bash scripts/harden.sh fuzz $(or $(FUZZ_SECONDS),60)
## sanitize: every phase at small sizes under compute-sanitizer memcheck/racecheck/initcheck/synccheck (GPU)
sanitize: all
	bash scripts/harden.sh sanitize

# ---------------------------------------------------------------- data, run, report, profiling
.PHONY: data run report gpu-check profile ncu trace clean help
## data: data/mnist and data/fashion-mnist from DATA_SRC or the public mirrors, md5 verified
data:
	bash scripts/fetch_data.sh "$(DATA_SRC)" data
## run [FULL=1]: the quick notebook (its steps' times in profiles/<gpu>/quick/run_all__quick.json), records in profiles/<gpu>/quick/ (FULL=1: every benchmark, profiles/<gpu>/); without a GPU only the report
run:
	FULL=$(FULL) bash scripts/run_all.sh
## report [REPORT_PY=python3]: report/REPORT.md and report/figures from profiles/ (no GPU needed; REPORT_PY: an interpreter with numpy and matplotlib instead of the pinned venv, e.g. on a machine without network; its PNGs may differ in bytes)
REPORT_PY ?= $(VENV_PY)
report: $(if $(filter $(VENV_PY),$(REPORT_PY)),$(VENV_PY))
	$(REPORT_PY) report/make_report.py --profiles profiles --out report
## gpu-check: on a GPU machine: build, test-gpu, each phase briefly with --validate, archive to OUT_DIR
gpu-check:
	bash scripts/gpu_check.sh
## profile PHASE=n [ARGS=...]: nsys profile with our tracer off, stats CSVs under profiles/<device>/
profile:
	bash scripts/profile.sh nsys "$(PHASE)" $(ARGS)
## ncu PHASE=n KERNEL=name [SKIP=n] [STALLS=1] [ARGS=...]: Nsight Compute on one kernel launch (STALLS=1: stalls by code region)
ncu:
	KERNEL="$(KERNEL)" SKIP="$(SKIP)" STALLS="$(STALLS)" PER="$(PER)" bash scripts/profile.sh ncu "$(PHASE)" $(ARGS)
## trace PHASE=n [ARGS=...]: our CUPTI Chrome trace of the phase
trace:
	bash scripts/profile.sh trace "$(PHASE)" $(ARGS)
clean:
	rm -rf $(BUILD)
help:
	@grep -E '^## ' Makefile | sed 's/^## /  make /'

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
