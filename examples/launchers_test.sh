#!/usr/bin/env bash
# examples:train under the launchers people already use, as a user would start it:
#  1. PyTorch's own torchrun (its elastic agent and static rendezvous; the agent of node 0
#     hosts the store) as two "nodes" of one process each on this machine, and its restart of
#     a failed worker group (the restarted workers resume from the committed checkpoint), with
#     `python3 -m torch.distributed.run --no_python` of the PyTorch the build is configured with
#     (its TCPStore protocol must match the LibTorch examples:train links: a 2.x binary cannot
#     rendezvous through 1.13's agent store);
#  2. SLURM's variables as srun sets them for two tasks (no RANK);
#  3. FSDP2 features from the command line on 4 local ranks: HSDP --mesh=2x2, --init=meta,
#     --grad_accum, --clip_grad_norm and --lr_schedule=cosine with --warmup_steps;
# each checked against eager LibTorch (--check_eager prints the largest relative loss
# difference; it must be below 1e-5).
set -euo pipefail
out="${TEST_TMPDIR:-$(mktemp -d)}/launchers"
mkdir -p "$out"
train="$PWD/examples/train"
python=${1:?usage: launchers_test.sh PYTHON (the Python of the configured PyTorch: @libtorch//:python3)}
[[ "$python" == /* ]] || python="$PWD/$python"

check_eager() {  # log file
  python3 - "$1" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
m = re.search(r"largest relative loss difference to eager: ([0-9.e+-]+)", text)
assert m, "no eager comparison in " + sys.argv[1] + ":\n" + text
assert float(m.group(1)) < 1e-5, m.group(0)
print(sys.argv[1], m.group(0))
PY
}

port=$("$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
pids=()
for node in 0 1; do
  "$python" -m torch.distributed.run --no_python --redirects=1:0 --tee=1:0 --nnodes=2 --nproc_per_node=1 --node_rank=$node \
      --master_addr=127.0.0.1 --master_port="$port" \
      "$train" --steps=3 --check_eager --checkpoint=false --out_dir="$out/torchrun" > "$out/node$node.log" 2>&1 &
  pids+=($!)
done
for i in 0 1; do
  if ! wait "${pids[$i]}"; then
    echo "torchrun node $i failed:"; cat "$out/node$i.log"; exit 1
  fi
done
grep -q "2 ranks" "$out/node0.log" || { echo "rank 0 should see 2 ranks:"; cat "$out/node0.log"; exit 1; }
check_eager "$out/node0.log"

# torchrun's restart (--max_restarts): the first attempt trains 2 steps and commits them, then
# rank 1 fails; the agent restarts both workers (TORCHELASTIC_RESTART_COUNT=1, a fresh store
# prefix), which resume from the committed step 2 and train to step 4, bitwise as a run that
# never stopped.
cat > "$out/elastic_worker.sh" <<SH
#!/bin/sh
if [ "\$TORCHELASTIC_RESTART_COUNT" = 0 ]; then
  "$train" --steps=2 --out_dir="$out/elastic" || exit \$?
  if [ "\$RANK" = 1 ]; then exit 3; fi
  exit 0
fi
exec "$train" --steps=4 --resume --out_dir="$out/elastic"
SH
chmod +x "$out/elastic_worker.sh"
port=$("$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
# --redirects/--tee name a local rank that does not exist: 1.13's torchrun under Python 3.11 cannot
# parse "0" (Std.NONE is no member when IntFlag is iterated), and a mapping defaults the rest to NONE.
"$python" -m torch.distributed.run --no_python --nnodes=1 --nproc_per_node=2 --max_restarts=1 --redirects=2:0 --tee=2:0 \
    --master_addr=127.0.0.1 --master_port="$port" "$out/elastic_worker.sh" > "$out/elastic.log" 2>&1 \
  || { echo "torchrun with a restart failed:"; cat "$out/elastic.log"; exit 1; }
grep -q "resumed from $out/elastic/checkpoint/step-00000002 at step 2" "$out/elastic.log" \
  || { echo "the restarted workers did not resume at step 2:"; cat "$out/elastic.log"; exit 1; }
"$train" --steps=4 --world_size=2 --out_dir="$out/elastic_straight" 2> "$out/elastic_straight.log" \
  || { cat "$out/elastic_straight.log"; exit 1; }
for f in rank0.pt rank1.pt manifest.json; do
  cmp "$out/elastic_straight/checkpoint/step-00000004/$f" "$out/elastic/checkpoint/step-00000004/$f" \
    || { echo "step 4 after torchrun's restart differs from the straight run ($f)"; exit 1; }
done
echo "torchrun restart: resumed at step 2, step 4 bitwise the straight run's"

# SLURM: two tasks as srun starts them (no RANK; SLURM_PROCID/NTASKS/LOCALID, the master the
# first host of SLURM_JOB_NODELIST, the port 15000 + the last four digits of SLURM_JOB_ID).
# --world_size is left at its default (2): a task must not launch workers of its own.
job=$("$python" -c '
import socket
for job in range(4242, 14242):
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", 15000 + job % 10000)); print(job); break
    except OSError:
        pass
    finally:
        s.close()
')
pids=()
for task in 0 1; do
  env -u RANK -u WORLD_SIZE -u LOCAL_RANK -u MASTER_ADDR -u MASTER_PORT \
      SLURM_PROCID=$task SLURM_NTASKS=2 SLURM_LOCALID=$task SLURM_JOB_ID="$job" \
      SLURM_JOB_NODELIST="localhost,node[2-3]" \
      "$train" --steps=3 --check_eager --checkpoint=false --out_dir="$out/slurm" > "$out/task$task.log" 2>&1 &
  pids+=($!)
done
for i in 0 1; do
  if ! wait "${pids[$i]}"; then
    echo "SLURM task $i failed:"; cat "$out/task$i.log"; exit 1
  fi
done
grep -q "2 ranks" "$out/task0.log" || { echo "task 0 should be rank 0 of 2:"; cat "$out/task0.log"; exit 1; }
if grep -q "magi: llama" "$out/task1.log"; then
  echo "task 1 printed rank 0's banner (it launched a job of its own):"; cat "$out/task1.log"; exit 1
fi
check_eager "$out/task0.log"

"$train" --world_size=4 --mesh=2x2 --init=meta --grad_accum=2 --batch_size=4 --clip_grad_norm=0.5 \
    --lr_schedule=cosine --warmup_steps=2 --steps=4 --check_eager --checkpoint=false --out_dir="$out/fsdp2" \
    2> "$out/fsdp2.log" || { cat "$out/fsdp2.log"; exit 1; }
check_eager "$out/fsdp2.log"
echo "launchers ok"
