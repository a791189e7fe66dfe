#!/usr/bin/env bash
# Every program reads numbers alike (zoe_parse_number, zoe_parse_u64: a decimal number as JSON
# writes one; an unsigned integer of decimal digits up to 2^64 - 1): a leading space, a sign
# where none belongs, hex, an exponent where an integer is wanted, an overflow, each refused
# with exit 2 and one line naming the value, by zoe-train, zoe-plan, zoe-data and zoe-generate.
# Usage: test_numbers_cli.sh ZOE_TRAIN ZOE_PLAN ZOE_DATA ZOE_GENERATE MPIEXEC CORPUS
set -u
train="$1" plan="$2" data="$3" generate="$4" mpiexec="$5" corpus="$6"
fails=0 passes=0
expect() { # value, program..., -- its arguments with @ where the value goes
  local value="$1"; shift
  local cmd=()
  for a in "$@"; do [ "$a" = "@" ] && cmd+=("$value") || cmd+=("$a"); done
  local err rc
  "${cmd[@]}" >/dev/null 2>"$out/err"
  rc=$?
  err="$(grep '^zoe-' "$out/err")" # not mpiexec's own lines
  if [ "$rc" -ne 2 ] || [ "$(printf '%s\n' "$err" | grep -c .)" -ne 1 ] || [[ "$err" != *"$value"* ]]; then
    echo "FAIL: ${cmd[*]}: exit $rc, '$err' (want exit 2 and one line naming '$value')"
    fails=$((fails + 1))
  else
    passes=$((passes + 1))
  fi
}
out="$(mktemp -d)"; trap 'rm -rf "$out"' EXIT
for v in " 2" "+2" "0x2" "2e0x" "1e999" "nan" "-1"; do
  expect "$v" "$mpiexec" -np 1 "$train" --data "$corpus" --micro-batch @
  expect "$v" "$plan" --tp @
  expect "$v" "$plan" --offload-ratio @
  expect "$v" "$data" --input "$corpus" --output-prefix "$out/x" --threads @
  expect "$v" "$generate" --temperature @
done
for v in " -1" "-1" "18446744073709551616" "0x10" "1.5" "+5"; do
  expect "$v" "$generate" --seed @
  expect "$v" "$mpiexec" -np 1 "$train" --data "$corpus" --seed @
done
[ -e "$out/x.bin" ] && { echo "FAIL: zoe-data left output behind"; fails=$((fails + 1)); }
echo "test_numbers_cli: $passes passed, $fails failed"
[ "$fails" -eq 0 ]
