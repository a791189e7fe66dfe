#!/usr/bin/env bash
# Every program reads its command line by one rule (zoe_cli_value, zoe_parse_number,
# zoe_parse_u64): a number as JSON writes one, so a leading space, a sign where none belongs, hex,
# an exponent where an integer is wanted and an overflow are refused; each option at most once;
# an option without its value is named. One table: each row is a program run with bad arguments,
# which must exit 2 with one line on stderr that contains the row's text, and write nothing.
# zoe-train's rows run in process in test_config_strict (each mpiexec start costs a second or
# two): two stay here for the program's own exit 2 under mpiexec.
# A failing row shows the program's whole stderr: an exit 1 whose only lines were Open MPI's (a
# failed MPI_Init, #34) once read here as an exit with no output at all.
# Usage: test_cli_rules.sh ZOE_TRAIN ZOE_PLAN ZOE_DATA ZOE_GENERATE ZOE_CKPT MPIEXEC CORPUS
set -u
train="$1" plan="$2" data="$3" generate="$4" ckpt="$5" mpiexec="$6" corpus="$7"
fails=0 passes=0
row() { # text the message must contain, then the command
  local want="$1"; shift
  local err rc
  "$@" >/dev/null 2>"$out/err"
  rc=$?
  err="$(grep -E '^(usage: )?zoe-' "$out/err")" # not mpiexec's own lines
  if [ "$rc" -ne 2 ] || [ "$(printf '%s\n' "$err" | grep -c .)" -ne 1 ] || [[ "$err" != *"$want"* ]]; then
    echo "FAIL: $*: exit $rc, '$err' (want exit 2 and one line containing '$want'); stderr:"
    sed 's/^/    /' "$out/err"
    fails=$((fails + 1))
  else
    passes=$((passes + 1))
  fi
}
out="$(mktemp -d)"; trap 'rm -rf "$out"' EXIT
zt=("$mpiexec" -np 1 "$train" --data "$corpus")
zd=("$data" --input "$corpus" --output-prefix "$out/x")
zg=("$generate" --checkpoint "$out/none" --prompt hi)
# numbers
for v in " 2" "+2" "0x2" "0x1p1" "2e0x" "1e999" "nan" "-1"; do
  row "$v" "$plan" --tp "$v"
  row "$v" "$plan" --offload-ratio "$v"
  row "$v" "${zd[@]}" --threads "$v"
  row "$v" "$generate" --temperature "$v"
done
for v in " -1" "-1" "18446744073709551616" "0x10" "1.5" "+5" " 0.5"; do
  row "$v" "$generate" --seed "$v"
done
row "0x2" "${zt[@]}" --micro-batch 0x2
# an option given twice, in either form, is refused naming it
row "option --lr given twice" "${zt[@]}" --lr 1e-3 --lr=2e-3
row "option --tp given twice" "$plan" --tp 1 --tp 2
row "option --model given twice" "$plan" --model gpt2-124m --model=demo
row "option --json given twice" "$plan" --json --json
row "option --seed given twice" "${zg[@]}" --seed 1 --seed 2
row "option --threads given twice" "${zd[@]}" --threads 1 --threads=2
row "option --append-eod given twice" "${zd[@]}" --append-eod --append-eod
# an option without its value is named
row "option --model needs a value" "$plan" --model
row "option --tp needs a value" "$plan" --tp
row "option --seed needs a value" "${zg[@]}" --seed
row "option --threads needs a value" "${zd[@]}" --threads
row "usage: zoe-ckpt" "$ckpt" export --hf # positional: no option of its own to repeat
# the bad word named: an unknown option (also as the last argument, where it has no value to
# need), an unknown command, an extra argument
row "unknown option '--bogus'" "$plan" --bogus
row "unknown option '--bogus'" "$plan" --model demo --bogus
row "unknown option '--bogus=1'" "$plan" --bogus=1
row "unknown command 'frob'" "$ckpt" frob "$out"
row "unexpected argument 'extra'" "$ckpt" info "$out" extra
row "unexpected argument 'extra'" "$ckpt" verify "$out" extra
# a file where a checkpoint is wanted is not a checkpoint, not a missing one; zoe-train says so
# in its one line, without the plan's line before it
printf 'not a checkpoint\n' >"$out/file.txt"
row "'$out/file.txt' is not a checkpoint: it is a file" "$ckpt" verify "$out/file.txt"
row "'$out/file.txt' is not a checkpoint: it is a file" "$ckpt" info "$out/file.txt"
row "'$out/file.txt' is not a checkpoint: it is a file" "${zt[@]}" --steps 2 --resume "$out/file.txt"
row "checkpoint '$out/none' does not exist" "$ckpt" verify "$out/none"
"${zt[@]}" --steps 2 --resume "$out/file.txt" 2>/dev/null | grep '^zoe-' >"$out/stdout"
if [ -s "$out/stdout" ]; then
  echo "FAIL: a refused --resume printed before its error: $(cat "$out/stdout")"; fails=$((fails + 1))
else
  passes=$((passes + 1))
fi
# a number out of range in a config file is quoted as written, not as the double it became
printf '{"lr": 1e999}\n' >"$out/inf.json"
row "--lr: '1e999' is not a number" "${zt[@]}" --config "$out/inf.json"
printf '{"lr": -2E+999}\n' >"$out/ninf.json"
row "--lr: '-2E+999' is not a number" "${zt[@]}" --config "$out/ninf.json"
# zoe-generate judges its command line before MPI starts: a bad one is named even where MPI_Init
# fails (here: Open MPI's session directory cannot be made, as when a neighbouring job removes
# it; before, exit 1 and Open MPI's lines only). With a good one, MPI's failure is not silent.
: >"$out/file"
no_mpi=(env OMPI_MCA_orte_tmpdir_base="$out/file/sessions")
row "--temperature 0x2" "${no_mpi[@]}" "$generate" --temperature 0x2
row "option --seed given twice" "${no_mpi[@]}" "${zg[@]}" --seed 1 --seed 2
row "give exactly one of --prompt" "${no_mpi[@]}" "$generate" --checkpoint "$out/none"
"${no_mpi[@]}" "${zg[@]}" >/dev/null 2>"$out/err"
rc=$?
if [ "$rc" -eq 0 ] || ! grep -q "$out/file/sessions" "$out/err"; then
  echo "FAIL: zoe-generate where MPI cannot start: exit $rc, stderr not naming the directory:"
  sed 's/^/    /' "$out/err"
  fails=$((fails + 1))
else
  passes=$((passes + 1))
fi
[ -e "$out/x.bin" ] && { echo "FAIL: zoe-data left output behind"; fails=$((fails + 1)); }
echo "test_cli_rules: $passes passed, $fails failed"
[ "$fails" -eq 0 ]
