#!/bin/bash
# Runs every scenario of the check, one after the other (2-vCPU VM); output in out/*.txt.
cd /work/wt/check24
mkdir -p out
[ -d models/tiny-mistral ] || /work/main/.venv-vllm/bin/python make_models.py models
mkdir -p models/tok-qwen2 && cp models/tiny-qwen2/{tokenizer.json,tokenizer_config.json,chat_template.jinja} models/tok-qwen2/
run() {  # run NAME CMD...
  local name=$1; shift
  if [ "$(date -u +%H%M)" -ge 2154 ]; then echo "SKIPPED $name: too late" | tee out/$name.txt; return; fi
  echo "### $name: $* (start $(date -u +%H:%M:%S) UTC)" | tee out/$name.txt
  /usr/bin/time -f "wall %e s" "$@" >>out/$name.txt 2>&1
  echo "### $name done $(date -u +%H:%M:%S) UTC" | tee -a out/$name.txt
}
run vllm_qwen /work/main/.venv/bin/python vllm_check.py qwenfix
run vllm_gpt2 /work/main/.venv/bin/python vllm_check.py gpt2
run vllm_more /work/main/.venv/bin/python vllm_check.py mistral qwen-defaults
run torch_nn ./run_py.sh torch_nn torch_nn.py
run hf ./run_py.sh hf hf_models.py
run compile ./run_py.sh compile compile_ro.py
run hf_bare ./run_py.sh hf_bare hf_models.py bare
run torch_nn_bare ./run_py.sh torch_nn_bare torch_nn.py bare
