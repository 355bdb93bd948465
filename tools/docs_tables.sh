#!/usr/bin/env bash
# Writes the strategy-search tables of docs/passes.md (and the frontier chart), or checks
# that they are current. Each table in the doc is fenced by
#   <!-- table NAME: tools/docs_tables.sh ... -->  ...  <!-- end table NAME -->
# and this script is the only writer of what lies between.
#
#   tools/docs_tables.sh            re-measure everything: the 4-layer table (cheap) and the
#                                   32-layer 8B frontier twice (the step captured with
#                                   LibTorch 1.13 and with PyTorch 2.x, --torch2=SERIES, 2.12
#                                   by default: ~1 min to build each, ~12 budgets searched
#                                   each), the exhaustive comparison on the 4-layer step,
#                                   docs/search_frontier_8b.svg and search_frontier_8b_torch2.svg
#   tools/docs_tables.sh --quick    only the 4-layer frontier table (no LibTorch; seconds)
#   tools/docs_tables.sh --quick --check --magi=PATH
#                                   exit 1 with a diff if the doc's 4-layer table is stale
#                                   (//tools:docs_tables_test runs this)
#   tools/docs_tables.sh --calibration
#                                   only the predicted-vs-measured table of calibration by
#                                   default (examples/calibration_accuracy.sh: four 66-step
#                                   trainings on 2 CPU ranks, ~20 s), repeated --repeats=N
#                                   times (10): keeps the runs' summaries in
#                                   docs/benchmarks/calibration_cpu/runK/ and renders the
#                                   tables from them (tools/doc_tables.py); measured times, so
#                                   a re-run reproduces them within the machine's noise
#
# Tables list predictions only (step, exposed communication, peak, recomputed nodes, plan):
# they are deterministic, so a re-run reproduces them byte for byte. Search times depend on
# the machine and are printed to stdout, not written into checked tables.
set -euo pipefail

quick=0
check=0
repeats=10
torch2=2.12  # the PyTorch 2.x series the 2.x capture of the 8B step uses (docs/torch2.md)
calibration=0
magi=""
docs=docs/passes.md
for arg in "$@"; do
  case "$arg" in
    --quick) quick=1 ;;
    --check) check=1 ;;
    --calibration) calibration=1 ;;
    --repeats=*) repeats="${arg#--repeats=}" ;;
    --magi=*) magi="${arg#--magi=}" ;;
    --docs=*) docs="${arg#--docs=}" ;;
    --torch2=*) torch2="${arg#--torch2=}" ;;
    *) echo "docs_tables.sh: unknown argument $arg" >&2; exit 2 ;;
  esac
done
if ! [[ $repeats =~ ^[1-9][0-9]*$ ]]; then
  echo "docs_tables.sh: --repeats=$repeats: give a positive number" >&2
  exit 2
fi
if [[ $check -eq 1 && $quick -eq 0 ]]; then
  echo "docs_tables.sh: --check needs --quick (the full tables take minutes and are re-measured by hand)" >&2
  exit 2
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Replaces (or, with --check, compares) the block NAME of $docs with file $2.
update_block() {
  local name=$1 body=$2
  if ! grep -q "^<!-- table $name:" "$docs"; then
    echo "docs_tables.sh: $docs has no '<!-- table $name: ... -->' block" >&2
    exit 1
  fi
  awk -v name="$name" -v body="$body" '
    $0 ~ "^<!-- table " name ":" {print; while ((getline line < body) > 0) print line; skip = 1; next}
    $0 == "<!-- end table " name " -->" {skip = 0}
    !skip {print}' "$docs" > "$tmp/doc.md"
  if [[ $check -eq 1 ]]; then
    if ! diff -u "$docs" "$tmp/doc.md"; then
      echo "docs_tables.sh: table '$name' in $docs is stale; re-run tools/docs_tables.sh --quick" >&2
      exit 1
    fi
    echo "table '$name' is current"
  else
    cp "$tmp/doc.md" "$tmp/doc.new" && mv "$tmp/doc.new" "$docs"
    echo "wrote table '$name' into $docs"
  fi
}

if [[ $calibration -eq 1 ]]; then
  # The default build, as users run it; copied (bazel-bin follows the last build's configuration).
  tools/bazel build //examples:train >&2
  cp bazel-bin/examples/train "$tmp/train"
  dirty=$(git diff --quiet HEAD -- . ':!docs' || echo ' with uncommitted changes')
  load="$(date -u +%Y-%m-%d), commit $(git rev-parse --short HEAD)$dirty, $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg) before the runs"
  # The raw output the doc's tables are rendered from (tools/doc_tables.py): each repeat's four
  # summaries, and when and where they ran. The machine is shared: a run's mean moves by ~10%
  # between identical runs here, so one repeat says little about the prediction.
  raw=docs/benchmarks/calibration_cpu
  rm -rf "$raw.new" && mkdir -p "$raw.new"
  for ((r = 1; r <= repeats; r++)); do
    echo "calibration: repeat $r of $repeats" >&2
    examples/calibration_accuracy.sh "$tmp/train" "$tmp/runs$r"
    mkdir -p "$raw.new/run$r"
    for name in plain_first plain_cached pipeline_first pipeline_cached; do cp "$tmp/runs$r/$name.json" "$raw.new/run$r/"; done
  done
  echo "$load" > "$raw.new/machine.txt"
  rm -rf "$raw" && mv "$raw.new" "$raw"
  python3 tools/doc_tables.py write "$docs"
  exit 0
fi
if [[ -z "$magi" ]]; then
  # Optimized (the search times printed are then meaningful); copied, since bazel-bin
  # follows the configuration of the last build.
  tools/bazel build --config=opt //magi/tools:magi >&2
  cp bazel-bin/magi/tools/magi "$tmp/magi"
  magi="$tmp/magi"
fi

# The frontier text table (magi plan --frontier) as a markdown table without the search-time
# column: budget_GB step_ms exposed_ms peak_GB recomputed search_s pipeline.
frontier_markdown() {
  echo "| budget (GB) | step (ms) | exposed comm. (ms) | peak (GB) | recomputed nodes | plan |"
  echo "| ---: | ---: | ---: | ---: | ---: | --- |"
  awk '/^ *budget_GB/ {on = 1; next}
       on && /nothing fits/ {sub(/^ +/, ""); b = $1; sub(/^[^(]*\(nothing fits: /, ""); sub(/\)$/, "");
                             printf "| %s | - | - | - | - | nothing fits: %s |\n", b, $0; next}
       on && NF >= 7 {printf "| %s | %s | %s | %s | %s | `%s` |\n", $1, $2, $3, $4, $5, $7}
       on && NF < 7 {on = 0}' "$1"
}

# 1. The 4-layer version of the 8B step (a checked-in fixture): cheap, checked by a test.
STEP4=magi/passes/testdata/step8b_4layers.mir
"$magi" plan "$STEP4" --frontier=9,9.2,9.3,9.4,9.6,9.8,10,10.5,11 --threads=2 > "$tmp/four.txt"
cat "$tmp/four.txt"
frontier_markdown "$tmp/four.txt" > "$tmp/four.md"
update_block search-frontier-4layers "$tmp/four.md"
[[ $quick -eq 1 ]] && exit 0

# 2. The exhaustive comparison on the 4-layer step (prints timings; the table keeps the gap).
"$magi" plan "$STEP4" --frontier=9,9.2,9.3,9.4,9.6,9.8,10,10.5,11 --exhaustive=true > "$tmp/exhaustive.txt"
cat "$tmp/exhaustive.txt"
{
  echo "| budget (GB) | search (ms) | exhaustive (ms) | search vs exhaustive | exhaustive best |"
  echo "| ---: | ---: | ---: | ---: | --- |"
  # Columns: budget_GB search_ms exhaustive_ms gap time_s, then the best pipeline or
  # "(nothing fits)" (two words: print everything after the fifth column, not $6).
  awk '/^exhaustive search over/ {on = 1; next} on && /^ *budget_GB/ {next}
       on && NF >= 6 {best = $0; sub(/^ *[^ ]+ +[^ ]+ +[^ ]+ +[^ ]+ +[^ ]+ +/, "", best)
                      if (best == "(nothing fits)") printf "| %s | %s | %s | %s | nothing fits |\n", $1, $2, $3, $4
                      else printf "| %s | %s | %s | %s | `%s` |\n", $1, $2, $3, $4, best}' "$tmp/exhaustive.txt"
} > "$tmp/exhaustive.md"
update_block search-exhaustive-4layers "$tmp/exhaustive.md"

# 3. The 32-layer 8B step: captured with LibTorch, then searched by the LibTorch-free tool.
# Capture is done once and is not what is measured: the default (fastbuild) binary will do.
# First the PyTorch 2.x capture (MAGI_TORCH=$torch2, its own output base; flash attention's
# meta kernels, so no [seq, seq] probabilities), then LibTorch 1.13's, last, so that bazel-bin
# is the default build's again when this script ends.
MAGI_TORCH=$torch2 tools/bazel run //magi/benchmarks:dump_step_8b -- --layers=32 --o="$tmp/step8b_torch2.mir" >&2
"$magi" plan "$tmp/step8b_torch2.mir" --frontier=24.3,24.35,24.5,25,26,27,28,29,30,31,32,35,40,80 \
  --svg="$tmp/frontier_torch2.svg" > "$tmp/eight_torch2.txt"
cat "$tmp/eight_torch2.txt"
frontier_markdown "$tmp/eight_torch2.txt" > "$tmp/eight_torch2.md"
update_block search-frontier-8b-torch2 "$tmp/eight_torch2.md"
cp "$tmp/frontier_torch2.svg" docs/search_frontier_8b_torch2.svg.tmp &&
  mv docs/search_frontier_8b_torch2.svg.tmp docs/search_frontier_8b_torch2.svg
echo "wrote docs/search_frontier_8b_torch2.svg"

tools/bazel build //magi/benchmarks:dump_step_8b >&2
bazel-bin/magi/benchmarks/dump_step_8b --layers=32 --o="$tmp/step8b.mir" >&2
"$magi" plan "$tmp/step8b.mir" --frontier=38,38.5,39,39.6,40,41,42,43,45,50,80 --svg="$tmp/frontier.svg" > "$tmp/eight.txt"
cat "$tmp/eight.txt"
frontier_markdown "$tmp/eight.txt" > "$tmp/eight.md"
update_block search-frontier-8b "$tmp/eight.md"
cp "$tmp/frontier.svg" docs/search_frontier_8b.svg.tmp && mv docs/search_frontier_8b.svg.tmp docs/search_frontier_8b.svg
echo "wrote docs/search_frontier_8b.svg"
