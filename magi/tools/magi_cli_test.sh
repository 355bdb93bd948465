#!/usr/bin/env bash
# End-to-end checks of the `magi` command-line tool: conversions between the three IR
# formats round-trip, DOT output, pass runs, and bad input gives a message and exit code.
set -euo pipefail

MAGI=magi/tools/magi
SAMPLE=magi/ir/testdata/fsdp_mlp_step.mir
TMP="${TEST_TMPDIR:-$(mktemp -d)}"
failures=0

check() {  # check NAME CONDITION-COMMAND...
  local name=$1
  shift
  if "$@"; then echo "PASS $name"; else echo "FAIL $name"; failures=$((failures + 1)); fi
}

expect_failure() {  # expect_failure NAME EXIT_CODE MESSAGE-SUBSTRING -- COMMAND...
  local name=$1 code=$2 message=$3
  shift 4
  local out rc=0
  out=$("$@" 2>&1) || rc=$?
  if [[ $rc -eq $code && "$out" == *"$message"* ]]; then
    echo "PASS $name"
  else
    echo "FAIL $name: exit $rc, output: $out"
    failures=$((failures + 1))
  fi
}

check "verify" test "$($MAGI verify $SAMPLE)" = "ok"
$MAGI fmt $SAMPLE -o "$TMP/fmt.mir"
check "fmt is canonical" cmp -s $SAMPLE "$TMP/fmt.mir"
$MAGI convert $SAMPLE -o "$TMP/m.pb"
$MAGI convert "$TMP/m.pb" -o "$TMP/m.json"
$MAGI convert "$TMP/m.json" -o "$TMP/back.mir"
check "text -> pb -> json -> text round trip" cmp -s $SAMPLE "$TMP/back.mir"
check "json is protobuf JSON" grep -q '"op": "magi::reduce_scatter_start"' "$TMP/m.json"
$MAGI dot $SAMPLE -o "$TMP/g.dot" --graph=train_step
check "dot has a collective hexagon" grep -q 'shape=hexagon' "$TMP/g.dot"
cat > "$TMP/partitioned.mir" <<'MIR'
module @m {
  graph @step {
    input %x: f32[4]
    %y.0 = magi::call([%x], callee = "step.ew.0") : f32[4]
    %z = aten::neg(%y.0) : f32[4]
    output z = %z
  }
  graph @step.ew.0 {
    input %x: f32[4]
    %a = aten::add.Tensor(%x, %x, alpha = 1) : f32[4] {module = "layers.0"}
    %y = aten::relu(%a) : f32[4] {module = "layers.1"}
    output y = %y
  }
}
MIR
$MAGI partition-map "$TMP/partitioned.mir" -o "$TMP/map.dot"
check "partition-map draws the partition as a cluster" grep -q 'label="@step.ew.0  (ew, 2 nodes)\\nlayers.0  ->  layers.1"' "$TMP/map.dot"
check "partition-map --compact counts ops" grep -q '1 x add.Tensor' <($MAGI partition-map "$TMP/partitioned.mir" --compact=true)
expect_failure "partition-map --compact=maybe" 1 "--compact is true or false" -- $MAGI partition-map "$TMP/partitioned.mir" --compact=maybe
$MAGI opt magi/ir/testdata/tiny_forward.mir --passes=dce -o "$TMP/opt.mir"
check "opt dce keeps live code" cmp -s magi/ir/testdata/tiny_forward.mir "$TMP/opt.mir"
check "registry lists dce" grep -q '^pass: .*dce' <($MAGI registry)
$MAGI opt $SAMPLE --passes='fixed-point(cse,dce)' -o "$TMP/cse.mir"
check "cse+dce keep a verified module" test "$($MAGI verify "$TMP/cse.mir")" = "ok"
check "cse+dce removed the dead nodes" test "$(grep -c ' = ' "$TMP/cse.mir")" -lt "$(grep -c ' = ' $SAMPLE)"
STEP=magi/passes/testdata/llama4_fsdp_step.mir
$MAGI opt $STEP --passes='bucket-collectives{max_mb=1},schedule-overlap{prefetch=2}' --dump_dir="$TMP" -o "$TMP/sched.mir"
check "per-pass dumps" test -s "$TMP/00-bucket-collectives.mir" -a -s "$TMP/01-schedule-overlap.dot"
check "scheduled step verifies" test "$($MAGI verify "$TMP/sched.mir")" = "ok"
$MAGI simulate $STEP --device=h200 --world=8 --trace="$TMP/trace.json" > "$TMP/sim.txt"
check "simulate reports exposed communication" grep -q 'exposed communication' "$TMP/sim.txt"
check "simulate writes a Chrome trace" grep -q '"traceEvents"' "$TMP/trace.json"
$MAGI simulate $STEP --device=cpu --live_at_peak=3 > "$TMP/live.txt"
check "simulate lists what is live at the peak" grep -q '^peak at node [0-9]* (.*): [0-9]* storages live' "$TMP/live.txt"
check "simulate lists the 3 largest storages there" test "$(grep -c '^  .* MB  %' "$TMP/live.txt")" -eq 3
$MAGI simulate "$TMP/sched.mir" --device=h200 --world=8 > "$TMP/sim2.txt"
check "scheduling hides communication" test "$(grep -o '[0-9.]*% hidden' "$TMP/sim2.txt" | tr -d '% hidden')" != "0.0"
$MAGI plan $STEP --memory_budget_gb=0.00175 -o "$TMP/planned.mir" > "$TMP/plan.txt"
check "plan prints the chosen pipeline" grep -q '^chosen: reshard-after-forward' "$TMP/plan.txt"
check "plan recomputes under a tight budget" grep -q 'auto-recompute{budget_mb=1.75' "$TMP/plan.txt"
check "planned module verifies" test "$($MAGI verify "$TMP/planned.mir")" = "ok"
# The plan's `reproduce:` line rebuilds the module it wrote, byte for byte, also with a device
# profile read from a file (whose name no builtin knows) and a calibration table.
sed 's/^name: cpu$/name: my-cpu/' magi/cost/profiles/cpu.profile > "$TMP/my.profile"
printf '0.001,3,aten::mm(f32[32,64], f32[64,64]strides[1,64]) -> f32[32,64]\n' > "$TMP/calibration.csv"
$MAGI plan $STEP --memory_budget_gb=0.00175 --device="$TMP/my.profile" --calibration="$TMP/calibration.csv" \
  -o "$TMP/planned_file.mir" > "$TMP/plan_file.txt"
check "plan with a file profile recomputes" grep -q 'auto-recompute{budget_mb=1.75.*profile=my-cpu' "$TMP/plan_file.txt"
reproduce=$(sed -n 's/^reproduce: magi opt //p' "$TMP/plan_file.txt")
eval "$MAGI opt $reproduce -o \"$TMP/reproduced.mir\""
check "magi opt reproduces the planned module" cmp -s "$TMP/planned_file.mir" "$TMP/reproduced.mir"
expect_failure "the file profile's name alone is not a cost model" 1 "no device profile 'my-cpu'" -- \
  $MAGI opt $STEP --passes="$(sed -n 's/^chosen: //p' "$TMP/plan_file.txt")"
expect_failure "impossible budget" 1 "no strategy fits 1000 bytes per rank" -- $MAGI plan $STEP --memory_budget_gb=0.000001
expect_failure "bad budget" 1 "--memory_budget_gb must be a positive, finite number" -- $MAGI plan $STEP --memory_budget_gb=lots
expect_failure "unknown device" 1 "no device profile 'tpu'; built in: cpu, h200" -- $MAGI simulate $STEP --device=tpu
# --budget_gb, the budget's old name, is still taken.
$MAGI plan $STEP --budget_gb=0.00175 > "$TMP/plan_old_name.txt"
check "plan takes --budget_gb" grep -q 'auto-recompute{budget_mb=1.75' "$TMP/plan_old_name.txt"
expect_failure "plan: both budget names" 2 "--budget_gb is the old name of --memory_budget_gb" -- $MAGI plan $STEP --budget_gb=1 --memory_budget_gb=1
expect_failure "plan needs a budget" 2 "'plan' needs --memory_budget_gb=..." -- $MAGI plan $STEP
# The budget frontier: a row per budget (the plan of each), nothing fitting shown as such,
# and the chart written whole.
$MAGI plan $STEP --frontier=0.0017:0.0019:0.0001,0.001 --svg="$TMP/f.svg" > /dev/null 2>&1 && frontier_rc=0 || frontier_rc=$?
check "frontier range and list do not mix" test "$frontier_rc" = 1
$MAGI plan $STEP --frontier=0.00175,0.0018,0.0019,0.0001 --svg="$TMP/frontier.svg" --threads=2 > "$TMP/frontier.txt"
check "frontier prints a row per budget" test "$(grep -c '^ *0\.00' "$TMP/frontier.txt")" = 4
check "frontier rows carry the plan" grep -q '^ *0\.0019 .*reshard-after-forward' "$TMP/frontier.txt"
check "frontier says where nothing fits" grep -q '^ *0\.0001 .*nothing fits' "$TMP/frontier.txt"
check "frontier writes an SVG" grep -q '</svg>' "$TMP/frontier.svg"
check "frontier SVG marks every plan" test "$(grep -c '<circle' "$TMP/frontier.svg")" = 3
check "frontier leaves no temp file" test "$(ls "$TMP" | grep -c 'frontier.svg')" = 1
expect_failure "frontier range backwards" 1 "--frontier=2:1:0.5: needs 0 < LO <= HI and STEP > 0" -- $MAGI plan $STEP --frontier=2:1:0.5
expect_failure "frontier bad list" 1 "--frontier=1,x: 'x' is not a positive, finite number of GB" -- $MAGI plan $STEP --frontier=1,x
expect_failure "frontier or budget" 2 "'plan' takes --memory_budget_gb=... or --frontier=..., not both" -- $MAGI plan $STEP --frontier=1 --memory_budget_gb=1
expect_failure "svg needs frontier" 2 "'plan' takes --svg and --exhaustive only with --frontier" -- $MAGI plan $STEP --memory_budget_gb=1 --svg=x.svg
check "no temp files left" test -z "$(ls "$TMP" | grep '\.tmp\.' || true)"

printf 'module @m {\n  graph @g {\n    %%y = aten::relu(%%x) : f32[2]\n  }\n}\n' > "$TMP/bad.mir"
expect_failure "parse error names file, line, column" 1 "bad.mir:3:21: use of undefined value %x" -- $MAGI verify "$TMP/bad.mir"
printf 'module @m {\n  graph @g {\n    input %%a: f32[4,8]\n    %%c = aten::mm(%%a, %%a) : f32[4,8]\n  }\n}\n' > "$TMP/bad_shapes.mir"
expect_failure "verifier error names the node and line" 1 "aten::mm defining %c at line 4:10: shapes do not chain" -- $MAGI verify "$TMP/bad_shapes.mir"
expect_failure "missing file" 1 "cannot open $TMP/none.mir: No such file or directory" -- $MAGI verify "$TMP/none.mir"
printf 'garbage' > "$TMP/bad.pb"
expect_failure "bad protobuf" 1 "bad.pb: not a valid magi.proto.ModuleProto" -- $MAGI verify "$TMP/bad.pb"
expect_failure "unknown extension" 1 "unknown IR file extension" -- $MAGI verify "$TMP/file.txt"
expect_failure "unknown pass" 1 "unknown pass 'nope'; registered: align-collectives, auto-recompute, batch-invariant, bucket-collectives, concat-matmuls, cse, dce" -- $MAGI opt $SAMPLE --passes=dce,nope
expect_failure "bad pipeline" 1 "pass pipeline, column 5: expected a pass name" -- $MAGI opt $SAMPLE --passes=dce,
expect_failure "unknown graph" 1 "no graph @nope" -- $MAGI dot $SAMPLE --graph=nope
expect_failure "unknown command" 2 "unknown command 'frob'" -- $MAGI frob
expect_failure "missing -o" 2 "'convert' needs -o OUT" -- $MAGI convert $SAMPLE
expect_failure "wrong arity" 2 "'verify' takes 1 file argument(s), got 0" -- $MAGI verify

# Sizes past int64 (issue 14): an error naming the value and the line, never a wrapped size.
printf 'module @m {\n  graph @g {\n    input %%x: f32[4611686018427387904]\n  }\n}\n' > "$TMP/huge.mir"
expect_failure "a byte size past int64 names the value and line" 1 \
  "huge.mir:3:15: input %x: f32[4611686018427387904] is 18446744073709551616 bytes, more than int64 can hold" -- $MAGI verify "$TMP/huge.mir"
printf 'module @m {\n  graph @g {\n    input %%a: f32[4]\n    %%c = aten::mm(%%a, %%a) : f32[3037000500,3037000500]\n  }\n}\n' > "$TMP/huge_mm.mir"
expect_failure "an element count past int64 names the value and line" 1 \
  "huge_mm.mir:4:29: %c: f32[3037000500,3037000500] has more elements than int64 can count" -- $MAGI verify "$TMP/huge_mm.mir"
printf 'module @m {\n  graph @g {\n    input %%x: f32[1152921504606846976]\n    input %%y: f32[1152921504606846976]\n    output y = %%y\n  }\n}\n' > "$TMP/sum.mir"
check "tensors that each fit verify" test "$($MAGI verify "$TMP/sum.mir")" = "ok"
expect_failure "simulate: live bytes past int64" 1 "the bytes live at the start (graph inputs) add up to more than int64" -- $MAGI simulate "$TMP/sum.mir"
expect_failure "plan: live bytes past int64" 1 "the bytes live at the start (graph inputs) add up to more than int64" -- $MAGI plan "$TMP/sum.mir" --memory_budget_gb=1000

# Invalid UTF-8 in a quoted name (issue 14): rejected at parse time with line:col, so
# nothing protobuf cannot carry is ever written.
printf 'module @m {\n  graph @g {\n    input %%"bad\xffname": f32[2]\n  }\n}\n' > "$TMP/utf8.mir"
expect_failure "invalid UTF-8 in a quoted name" 1 "utf8.mir:3:16: quoted text is not valid UTF-8 (byte 0xff)" -- $MAGI verify "$TMP/utf8.mir"
expect_failure "invalid UTF-8 is not converted" 1 "utf8.mir:3:16: quoted text is not valid UTF-8" -- $MAGI convert "$TMP/utf8.mir" -o "$TMP/utf8.pb"
check "no protobuf file written for invalid UTF-8" test ! -e "$TMP/utf8.pb"
printf 'module @m {\n  graph @g {\n    input %%"caf\xc3\xa9": f32[2]\n    output y = %%"caf\xc3\xa9"\n  }\n}\n' > "$TMP/utf8_ok.mir"
$MAGI convert "$TMP/utf8_ok.mir" -o "$TMP/utf8_ok.pb"
check "valid UTF-8 survives protobuf" test "$($MAGI verify "$TMP/utf8_ok.pb")" = "ok"

# Numbers (issue 14): NaN and infinity are refused by every numeric flag and pass
# option, as 0 and -1 are where they were.
for budget in nan NaN inf -inf infinity 1e999 0 -1; do
  expect_failure "--memory_budget_gb=$budget" 1 "--memory_budget_gb must be a positive, finite number, not '$budget'" -- $MAGI plan $STEP --memory_budget_gb=$budget
done
expect_failure "--memory_budget_gb past int64 bytes" 1 "--memory_budget_gb=1e300 is more bytes than int64 can hold" -- $MAGI plan $STEP --memory_budget_gb=1e300
for world in nan inf 0 -1 2.5; do
  expect_failure "--world=$world" 1 "--world must be a positive integer, not '$world'" -- $MAGI simulate $STEP --world=$world
  expect_failure "--live_at_peak=$world" 1 "--live_at_peak must be a positive integer, not '$world'" -- $MAGI simulate $STEP --live_at_peak=$world
done
for spec in 'bucket-collectives{max_mb=nan}' 'bucket-collectives{max_mb=inf}' 'bucket-collectives{max_mb=-1}' \
            'schedule-overlap{max_inflight_mb=nan}' 'schedule-overlap{max_inflight_mb=-inf}' \
            'schedule-overlap{prefetch=nan}' 'schedule-overlap{prefetch=inf}' 'schedule-overlap{prefetch=-1}' \
            'auto-recompute{budget_mb=nan}' 'auto-recompute{budget_gb=inf}' 'auto-recompute{budget_mb=0}' \
            'fixed-point{max_iterations=nan}(dce)' 'fixed-point{max_iterations=inf}(dce)' 'fixed-point{max_iterations=0}(dce)'; do
  rc=0
  out=$($MAGI opt $STEP --passes="$spec" -o "$TMP/numbers.mir" 2>&1) || rc=$?
  if [[ $rc -eq 1 && "$out" == *"must be"* || $rc -eq 1 && "$out" == *"takes"* ]]; then
    echo "PASS --passes=$spec is refused"
  else
    echo "FAIL --passes=$spec: exit $rc, output: $out"
    failures=$((failures + 1))
  fi
done
printf 'name: bad\nvector_flops: nan\n' > "$TMP/nan.profile"
expect_failure "a profile with NaN" 1 "'vector_flops' needs a non-negative, finite number, not 'nan'" -- $MAGI simulate $STEP --device="$TMP/nan.profile"

# Deterministic mode: the compile options are listed; batch-invariant unrolls a one-sequence graph.
check "registry lists deterministic mode's compile options" grep -q '^compile-option: deterministic, batch_invariant_sequences' <($MAGI registry)
printf 'module @m {\n  graph @g {\n    input %%w: f32[3,4] {role = param}\n    input %%x: f32[1,4]\n    %%t = aten::t(%%w) : f32[4,3]strides[1,4]\n    %%y = aten::mm(%%x, %%t) : f32[1,3]\n    output y = %%y\n  }\n}\n' > "$TMP/one_seq.mir"
$MAGI opt "$TMP/one_seq.mir" --passes='batch-invariant{batch=3}' -o "$TMP/three_seq.mir"
check "batch-invariant: one mm per sequence" test "$(grep -c 'aten::mm' "$TMP/three_seq.mir")" -eq 3
check "batch-invariant: the input takes 3 sequences" grep -q 'input %x: f32\[3,4\]' "$TMP/three_seq.mir"

# magi compare: magi-tensors-v1 dumps, bitwise.
python3 - "$TMP" <<'PY'
import json, struct, sys
def write(prefix, w, loss):
    data = struct.pack("<4f", *w) + struct.pack("<d", loss)
    open(prefix + ".bin", "wb").write(data)
    json.dump({"format": "magi-tensors-v1", "tensors": [
        {"name": "w", "dtype": "float32", "shape": [2, 2], "offset": 0, "nbytes": 16},
        {"name": "loss", "dtype": "float64", "shape": [], "offset": 16, "nbytes": 8}]}, open(prefix + ".json", "w"))
write(sys.argv[1] + "/run1", [1, 2, 3, 4], 2.5)
write(sys.argv[1] + "/run2", [1, 2, 3, 4], 2.5)
write(sys.argv[1] + "/run3", [1, 2, 3, 4.5], 2.5)
PY
check "compare: identical dumps" test "$($MAGI compare "$TMP/run1" "$TMP/run2.json")" = "identical: 2 tensors, 0.000 MB"
expect_failure "compare: the first differing element" 3 "first difference: tensor 'w' (float32[2,2]) element [1,1] (flat 3): $TMP/run1 4 (0x40800000), $TMP/run3 4.5 (0x40900000); 1 of 4 elements differ" -- $MAGI compare "$TMP/run1" "$TMP/run3"
expect_failure "compare: checkpoints need LibTorch" 1 "a.pt is a LibTorch archive; compare checkpoints with: bazel run //magi/training:compare_checkpoints" -- $MAGI compare "$TMP/a.pt" "$TMP/b.pt"
expect_failure "compare: a missing dump" 1 "cannot open $TMP/none.json" -- $MAGI compare "$TMP/none" "$TMP/run1"
# magi_compare, the same command without Protobuf (built on the GPU machine), says the same.
check "magi_compare: identical dumps" test "$(magi/tools/magi_compare "$TMP/run1" "$TMP/run2")" = "identical: 2 tensors, 0.000 MB"
expect_failure "magi_compare: the first differing element" 3 "first difference: tensor 'w' (float32[2,2]) element [1,1] (flat 3)" -- magi/tools/magi_compare "$TMP/run1" "$TMP/run3"
expect_failure "magi_compare: usage" 2 "usage: magi_compare A B" -- magi/tools/magi_compare "$TMP/run1"

# --help: every command prints its own usage on stdout and exits 0; `magi --help` lists them.
COMMANDS=(verify fmt convert dot partition-map opt simulate plan registry compare)
help_out=$($MAGI --help)
for cmd in "${COMMANDS[@]}"; do
  check "magi --help lists $cmd" grep -q "^  magi $cmd" <<<"$help_out"
  for flag in --help -h; do
    rc=0
    out=$($MAGI "$cmd" "$flag" 2>"$TMP/help.err") || rc=$?
    if [[ $rc -eq 0 && "$(head -n 1 <<<"$out")" == "usage: magi $cmd"* && ! -s "$TMP/help.err" ]]; then
      echo "PASS $cmd $flag"
    else
      echo "FAIL $cmd $flag: exit $rc, stdout: $out, stderr: $(cat "$TMP/help.err")"
      failures=$((failures + 1))
    fi
  done
done
check "opt --help explains --passes" grep -q -- '--passes=SPEC' <($MAGI opt --help)
check "--help wins over other arguments" test "$($MAGI plan $STEP --memory_budget_gb=1 --help | head -n 1)" = "usage: magi plan IN (--memory_budget_gb=B | --frontier=LO:HI:STEP [--svg=OUT.svg] [--exhaustive=true]) [--device=...] [--calibration=CSV] [--graph=NAME] [--threads=N] [-o OUT]"
check "magi help opt is opt's usage" test "$($MAGI help opt)" = "$($MAGI opt --help)"
check "magi -h lists the commands" test "$($MAGI -h)" = "$help_out"
expect_failure "unknown command with --help" 2 "unknown command 'frob'" -- $MAGI frob --help
check "failed write leaves no file" bash -c "! $MAGI convert $SAMPLE -o $TMP/missing-dir/x.pb 2>/dev/null && test ! -e $TMP/missing-dir"

echo "$failures failure(s)"
[[ $failures -eq 0 ]]
