# Two entry points, both self-contained on a fresh machine:
#   make demo   build .venv, install lcr, replay a built-in workload (+ a real trace when ../shared/data exists),
#               then the learned model against ARC/LIRS/S3-FIFO/W-TinyLFU
#   make test   build .venv with the test extras and run the suite
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
DATA   ?= ../shared/data
OUT    ?= demo-out
TORCH_VERSION ?= 2.13.0
# SGLANG=1 make test: also install SGLang 0.5.23 without CUDA (about 2 GB, mostly torch
# and triton) so the SGLang integration tests run instead of skipping.
SGLANG ?= 0
TEST_INSTALLS := $(VENV)/.installed-test $(if $(filter 1,$(SGLANG)),$(VENV)/.installed-sglang)
NATIVE_SOURCES := $(wildcard csrc/*/*.cpp csrc/*/*.h csrc/*/*.cu csrc/*/*.cuh)

.PHONY: demo test clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

$(VENV)/.installed: $(BIN)/python pyproject.toml setup.py $(NATIVE_SOURCES)
	$(BIN)/python -m pip install -q -e '.[ml]'
	touch $@

# torch is pinned first: on these machines 2.13.0 is a local CPU build, while an unpinned
# torch would pull the CUDA wheels (gigabytes). On a GPU box, install your own torch first.
$(VENV)/.installed-test: $(BIN)/python pyproject.toml setup.py $(NATIVE_SOURCES)
	$(BIN)/python -m pip install -q torch==$(TORCH_VERSION)
	$(BIN)/python -m pip install -q -e '.[test]'
	touch $@ $(VENV)/.installed

$(VENV)/.installed-sglang: $(VENV)/.installed-test sglang_patch/requirements-cpu.txt
	$(BIN)/python -m pip install -q --no-deps -r sglang_patch/requirements-cpu.txt
	touch $@

# The first two steps: the paper's robustness story (predictions inverted with probability
# p), for LARU as a user gets it (`laru`, the defaults) and for the paper's Algorithm 1 itself.
PAPER_LARU := laru:b=2;credit=0;guard=none;intervals=0
demo: $(VENV)/.installed
	$(BIN)/lcr sim zipf:requests=1000000,keys=100000,alpha=0.9,seed=0 \
	    --cache 1%,5%,10% --policies 'lru,opt,fpb,hf,laru,$(PAPER_LARU)' --predictor oracle --noise 0,0.25,0.5,0.75,1 \
	    --json $(OUT)/zipf.json --plot $(OUT)/zipf.png
	@if [ -f $(DATA)/classic/cache2k_web07.trace.xz ]; then \
	  $(BIN)/lcr sim $(DATA)/classic/cache2k_web07.trace.xz \
	    --cache 1%,5%,10% --policies 'lru,opt,fpb,hf,laru,$(PAPER_LARU)' --predictor oracle --noise 0,0.25,0.5,0.75,1 \
	    --json $(OUT)/web07.json --plot $(OUT)/web07.png; \
	else echo "($(DATA) not found: skipping the real-trace demo)"; fi
	@# The learned model against the heuristics users pick instead: the defaults are docs/predictor.md's best setting.
	$(BIN)/lcr sim $$(if [ -f $(DATA)/classic/cache2k_web07.trace.xz ]; then echo $(DATA)/classic/cache2k_web07.trace.xz; \
	    else echo zipf:requests=200000,keys=20000,alpha=0.9,seed=1; fi) \
	    --cache 1%,5%,10% --predictor lightgbm --policies lru,opt,arc,lirs,s3fifo,wtinylfu,laru --json $(OUT)/learned.json

test: $(TEST_INSTALLS)
	$(BIN)/python -m pytest -q

clean:
	rm -rf $(VENV) build *.egg-info lcr/*.so $(OUT)
