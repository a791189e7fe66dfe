#!/usr/bin/env bash
# The layers of DESIGN.md (docs/architecture.md): runtime <- kernels <- tensor_parallel, offload
# <- models <- engine <- tools. A file may include only headers of its own layer and the layers
# below it, and the tools only the public API. Inside engine/, the folders are layered the same
# way (formats <- tokenizer <- data; formats <- hf <- config <- train <- checkpoint <- generate;
# config <- plan), so no two concepts include each other: the plan sizes a run with
# engine/config (sizing.c), never with the trainer's code.
#
# Four checks, each a table of what a folder must not use:
#   includes  the #include lines of every source file;
#   headers   the public headers a tool includes (zoe-data reads datasets with zoe/data.h and its
#             flags with zoe/cli.h, nothing of training);
#   owners    a concept that lives in one layer only (Philox: kernels/philox.h and philox.c,
#             which the layers above draw from);
#   calls     with BUILD_DIR, the symbols each layer's library (and zoe-data's object) leaves
#             undefined, against the symbols the libraries it must not use define: a call
#             against the order is caught even where a program links every library.
set -u
root="${1:?usage: test_layering.sh REPO_ROOT [BUILD_DIR]}"
build="${2:-}"
cd "$root" || exit 2
fails=0
fail() {
  echo "FAIL layering: $*"
  fails=$((fails + 1))
}

# ---- includes ----
upper_api='"zoe/(model|optimizer|data|tokenizer|train|plan|checkpoint)\.h"'
declare -A forbidden=(
  [runtime]="\"(kernels|tensor_parallel|offload|models|engine)/|$upper_api"
  [kernels]="\"(tensor_parallel|offload|models|engine)/|$upper_api"
  [tensor_parallel]="\"(offload|models|engine)/|$upper_api"
  [offload]='"(tensor_parallel|models|engine)/|"zoe/(model|data|tokenizer|train|plan|checkpoint)\.h"'
  [models]='"(offload|engine)/|"zoe/(optimizer|data|tokenizer|train|plan|checkpoint)\.h"'
  [engine/formats]='"engine/(tokenizer|data|hf|config|train|checkpoint|plan|generate)/'
  [engine/tokenizer]='"engine/(data|hf|config|train|checkpoint|plan|generate)/'
  [engine/data]='"engine/(hf|config|train|checkpoint|plan|generate)/'
  [engine/hf]='"engine/(tokenizer|data|config|train|checkpoint|plan|generate)/'
  [engine/config]='"engine/(tokenizer|data|train|checkpoint|plan|generate)/'
  [engine/train]='"engine/(tokenizer|data|checkpoint|plan|generate)/'
  [engine/checkpoint]='"engine/(tokenizer|data|plan|generate)/'
  [engine/plan]='"engine/(tokenizer|data|train|checkpoint|generate)/'
  [engine/generate]='"engine/(tokenizer|data|plan)/'
  [tools]='"(runtime|kernels|tensor_parallel|offload|models|engine)/'
  # headers: a tool includes the public headers of what it does
  [tools/zoe-data]='"zoe/(model|optimizer|train|plan|checkpoint|generate)\.h"'
)
for dir in "${!forbidden[@]}"; do
  [ -d "$dir" ] || { fail "$dir/ is in the table but not in the tree"; continue; }
  while IFS= read -r hit; do
    fail "$hit (not allowed in $dir/)"
  done < <(grep -rnE "^#include (${forbidden[$dir]})" "$dir" --include='*.c' --include='*.h' \
             --include='*.cu' --include='*.cuh' 2>/dev/null)
done

# ---- owners: files named after the concept, and its functions' definitions, in one layer ----
declare -A owner=([philox]=kernels)
for concept in "${!owner[@]}"; do
  while IFS= read -r f; do
    fail "$f: $concept lives in ${owner[$concept]}/ only"
  done < <(find runtime kernels tensor_parallel offload models engine tools -name "$concept.*" \
             -not -path "${owner[$concept]}/*")
  while IFS= read -r hit; do
    fail "$hit: zoe_${concept}_* is defined in ${owner[$concept]}/ only"
  done < <(grep -rnE "^[a-z][a-z_0-9 ]*[ *]zoe_${concept}_?[a-z0-9_]*\(" runtime tensor_parallel offload \
             models engine tools --include='*.c' --include='*.cu' 2>/dev/null |
             grep -v ':static ')
done

# ---- calls ----
if [ -n "$build" ]; then
  engine_all="engine_formats engine_tokenizer engine_data engine_hf engine_config engine_train"
  engine_all="$engine_all engine_checkpoint engine_plan engine_generate"
  declare -A lib_of=([runtime]=runtime/libzoe_runtime.a [kernels]=kernels/libzoe_kernels.a
    [tensor_parallel]=tensor_parallel/libzoe_tensor_parallel.a
    [offload]=offload/libzoe_offload.a [models]=models/libzoe_models.a
    [zoe-data]=tools/zoe-data/CMakeFiles/zoe-data.dir/zoe-data.c.o)
  for e in $engine_all; do lib_of[$e]="engine/${e#engine_}/libzoe_$e.a"; done
  declare -A must_not_call=(
    [runtime]="kernels tensor_parallel offload models $engine_all"
    [kernels]="tensor_parallel offload models $engine_all"
    [tensor_parallel]="offload models $engine_all"
    [offload]="tensor_parallel models $engine_all"
    [models]="offload $engine_all"
    [engine_formats]="engine_tokenizer engine_data engine_hf engine_config engine_train engine_checkpoint engine_plan engine_generate"
    [engine_tokenizer]="engine_data engine_hf engine_config engine_train engine_checkpoint engine_plan engine_generate"
    [engine_data]="engine_hf engine_config engine_train engine_checkpoint engine_plan engine_generate"
    [engine_hf]="engine_tokenizer engine_data engine_config engine_train engine_checkpoint engine_plan engine_generate"
    [engine_config]="engine_tokenizer engine_data engine_train engine_checkpoint engine_plan engine_generate"
    [engine_train]="engine_tokenizer engine_data engine_checkpoint engine_plan engine_generate"
    [engine_checkpoint]="engine_tokenizer engine_data engine_plan engine_generate"
    [engine_plan]="engine_tokenizer engine_data engine_train engine_checkpoint engine_generate"
    [engine_generate]="engine_tokenizer engine_data engine_plan"
    [zoe-data]="tensor_parallel offload models engine_hf engine_config engine_train engine_checkpoint engine_plan engine_generate"
  )
  # each library's defined and undefined symbols, read once
  symbols="$(mktemp -d)"
  trap 'rm -rf "$symbols"' EXIT
  for name in "${!lib_of[@]}"; do
    lib="$build/${lib_of[$name]}"
    [ -f "$lib" ] || { fail "${lib_of[$name]} is not built in $build"; continue; }
    nm -g --defined-only "$lib" | awk 'NF == 3 && $3 ~ /^[a-z]/ { print $3 }' | sort -u \
      >"$symbols/$name.defined"
    nm -u "$lib" | awk '{ print $NF }' | sort -u >"$symbols/$name.undefined"
  done
  for user in "${!must_not_call[@]}"; do
    for callee in ${must_not_call[$user]}; do
      [ -f "$symbols/$user.undefined" ] && [ -f "$symbols/$callee.defined" ] || continue
      while IFS= read -r sym; do
        fail "${lib_of[$user]} calls $sym of ${lib_of[$callee]} ($user must not use $callee)"
      done < <(comm -12 "$symbols/$user.undefined" "$symbols/$callee.defined")
    done
  done
fi

[ "$fails" -eq 0 ] && echo "test_layering: 1 passed, 0 failed" || echo "test_layering: 0 passed, 1 failed ($fails uses against the layers)"
exit $((fails > 0))
