#!/usr/bin/env bash
# Re-records the reference CPU traces in traces/ (see traces/README.md), each at the cores this
# process may use and with the machine's calibration (so that plans on other machines rescale its
# times). Takes about 22 minutes on two cores: clip 15 (its contrastive loss alone at up to 16,384
# pairs), bert large 5.5, the rest 1.5. Run from the repository root after building, on an idle
# machine: the times are the machine's.
set -euo pipefail
headroom=${HEADROOM:-./build/default/headroom}
record() {
  local name=$1; shift
  local start end
  start=$(date +%s.%N)
  "$headroom" profile "$@" --threads "$(nproc)" -o "traces/$name.json" > /dev/null
  end=$(date +%s.%N)
  printf '%-16s %6.1f s  %7d bytes\n' "$name" "$(echo "$end - $start" | bc)" "$(stat -c %s "traces/$name.json")"
}
record cpu-mlp        --model mlp --batch-sizes 1,2,4,8,16,32,64
record cpu-cnn        --model cnn --batch-sizes 1,2,4,8,16,32,64
record cpu-bert       --model bert --set preset=mini --batch-sizes 1,2,4,8,16
record cpu-gpt        --model gpt --set preset=tiny --batch-sizes 1,2,4,8,16
record cpu-bert-large --model bert --set preset=large --batch-sizes 1,2,4 --repeats 2
record cpu-clip       --model clip --batch-sizes 256,1024,4096,16384 --repeats 3
