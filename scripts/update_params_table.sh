#!/usr/bin/env bash
# Regenerates the environment-variable table in docs/environment.md from src/common/params.def
# (between the markers <!-- params:begin --> and <!-- params:end -->).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build}
cmake --build "$build" --target ringfold_params >/dev/null
table=$("$build/ringfold_params" --markdown)
python3 - "$root/docs/environment.md" "$table" <<'PY'
import sys, re
path, table = sys.argv[1], sys.argv[2]
text = open(path).read()
new = re.sub(r"(<!-- params:begin -->\n).*?(<!-- params:end -->)", lambda m: m.group(1) + table + "\n" + m.group(2), text, flags=re.S)
open(path, "w").write(new)
PY
