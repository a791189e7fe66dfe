#!/usr/bin/env bash
# The layers of DESIGN.md (docs/architecture.md): runtime <- kernels <- tensor_parallel, offload
# <- models <- engine <- tools. A file may include only headers of its own layer and the layers
# below it, and the tools only the public API. Inside engine/, the folders are layered the same
# way (formats <- tokenizer <- data; formats <- hf <- train <- checkpoint <- plan, generate), so
# no two concepts include each other. Each rule lists what a folder must not include.
set -u
root="${1:?usage: test_layering.sh REPO_ROOT}"
cd "$root" || exit 2
above_runtime='"(kernels|tensor_parallel|offload|models|engine)/|"zoe/(model|optimizer|data|tokenizer|train|plan|checkpoint)\.h"'
declare -A forbidden=(
  [runtime]="$above_runtime"
  [kernels]='"(tensor_parallel|offload|models|engine)/|"zoe/(model|optimizer|data|tokenizer|train|plan|checkpoint)\.h"'
  [tensor_parallel]='"(offload|models|engine)/|"zoe/(model|optimizer|data|tokenizer|train|plan|checkpoint)\.h"'
  [offload]='"(tensor_parallel|models|engine)/|"zoe/(model|data|tokenizer|train|plan|checkpoint)\.h"'
  [models]='"(offload|engine)/|"zoe/(optimizer|data|tokenizer|train|plan|checkpoint)\.h"'
  [engine/formats]='"engine/(tokenizer|data|hf|train|checkpoint|plan|generate)/'
  [engine/tokenizer]='"engine/(data|hf|train|checkpoint|plan|generate)/'
  [engine/data]='"engine/(hf|train|checkpoint|plan|generate)/'
  [engine/hf]='"engine/(tokenizer|data|train|checkpoint|plan|generate)/'
  [engine/train]='"engine/(tokenizer|data|checkpoint|plan|generate)/'
  [engine/checkpoint]='"engine/(tokenizer|data|plan|generate)/'
  [engine/plan]='"engine/(tokenizer|data|generate)/'
  [engine/generate]='"engine/(tokenizer|data|plan)/'
  [tools]='"(runtime|kernels|tensor_parallel|offload|models|engine)/'
)
fails=0
for dir in "${!forbidden[@]}"; do
  while IFS= read -r hit; do
    echo "FAIL layering: $hit (not allowed in $dir/)"
    fails=$((fails + 1))
  done < <(grep -rnE "^#include (${forbidden[$dir]})" "$dir" --include='*.c' --include='*.h' \
             --include='*.cu' --include='*.cuh' 2>/dev/null)
done
[ "$fails" -eq 0 ] && echo "test_layering: 1 passed, 0 failed" || echo "test_layering: 0 passed, 1 failed ($fails includes)"
exit $((fails > 0))
