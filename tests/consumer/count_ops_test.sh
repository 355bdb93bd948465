#!/usr/bin/env bash
set -euo pipefail
out=$(printf 'module @m {\n  graph @g {\n    input %%x: f32[2]\n    %%a = aten::relu(%%x) : f32[2]\n    %%dead = aten::neg(%%x) : f32[2]\n    output a = %%a\n  }\n}\n' | ./count_ops)
[[ "$out" == "2 -> 1" ]] || { echo "unexpected output: $out"; exit 1; }
echo "ok: $out"
