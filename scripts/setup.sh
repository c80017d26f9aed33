#!/usr/bin/env bash
# Installs the Debian packages that building and testing tpserve need, then the Python packages
# pinned in scripts/requirements-test.txt. A no-op when all are present.
#   scripts/setup.sh [--build-only]   --build-only: what configuring and building need, no more
#                                     (the container image's build stage)
set -euo pipefail

build_packages=(
  cmake g++ make pkg-config python3 python3-pip
  libabsl-dev libicu-dev libopenblas-openmp-dev nlohmann-json3-dev libcli11-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libgloo-dev libboost-dev
  libcpp-httplib-dev  # the C++ integration tests' HTTP client
)
packages=(
  "${build_packages[@]}"
  python3-jinja2  # chat_templates_match_jinja2's reference (run with /usr/bin/python3)
  # the fuzz targets (scripts/fuzz.sh): clang with libFuzzer and the sanitizers' runtimes
  clang libclang-rt-14-dev
  # helm-render, the Helm chart tests' renderer (tests/helm): Go, sprig and what helm itself uses
  golang-go golang-github-masterminds-sprig-dev golang-github-xeipuuv-gojsonschema-dev
  golang-k8s-sigs-yaml-dev
)

build_only=0
[ "${1:-}" = --build-only ] && build_only=1
[ "$build_only" = 0 ] || packages=("${build_packages[@]}")

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} packages present"
else
  echo "setup: installing ${missing[*]}"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  if ! $sudo apt-get update -qq; then
    echo "setup: apt-get update failed: is a Debian package mirror reachable?" >&2
    exit 1
  fi
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

[ "$build_only" = 0 ] || exit 0

requirements="$(cd "$(dirname "$0")" && pwd)/requirements-test.txt"
# The pins whose package is absent or at another version.
mapfile -t missing_py < <(python3 - "$requirements" <<'PY'
import sys
from importlib.metadata import PackageNotFoundError, version

for line in open(sys.argv[1], encoding="utf-8"):
    pin = line.split("#")[0].strip()
    if not pin:
        continue
    name, wanted = pin.split("==")
    try:
        if version(name) == wanted:
            continue
    except PackageNotFoundError:
        pass
    print(pin)
PY
)
total_py="$(grep -c '==' "$requirements")"
if [ ${#missing_py[@]} -eq 0 ]; then
  echo "setup: all $total_py Python test packages present"
  exit 0
fi

echo "setup: installing ${missing_py[*]} (pip)"
# Debian's python3 refuses pip installs outside a virtual environment (PEP 668); the tests run
# the system python3, so the pins go beside its packages (the user's site-packages unless root).
pip_args=(--quiet --disable-pip-version-check)
[ "$(id -u)" -eq 0 ] || pip_args+=(--user)
err="$(mktemp)"
trap 'rm -f "$err"' EXIT
if ! PIP_BREAK_SYSTEM_PACKAGES=1 python3 -m pip install "${pip_args[@]}" "${missing_py[@]}" 2>"$err"; then
  echo "setup: pip could not install ${missing_py[*]}; is PyPI (or your package index) reachable?" >&2
  sed 's/^/  pip: /' "$err" | tail -5 >&2
  exit 1
fi
echo "setup: done"
