"""No executable of the build lists cuBLASLt or NCCL among the libraries it needs at start
(readelf's NEEDED entries): they are opened at first use, so a machine without them still runs the
coordinator, tpctl, the CPU worker and every test, and the CUDA worker names the missing one
(cuda_libraries). Those binaries answer --help with the libraries' paths set to missing files."""
import argparse
import os
import subprocess
import sys

RUNTIME_OPENED = ("libcublasLt.so", "libnccl.so")


def needed(path):
    out = subprocess.run(["readelf", "-d", path], capture_output=True, text=True)
    if out.returncode != 0:
        return None  # not an ELF file
    return [line.split("[", 1)[1].split("]", 1)[0] for line in out.stdout.splitlines()
            if "(NEEDED)" in line]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin-dir", required=True)
    args = parser.parse_args()
    checked, failures = 0, []
    for name in sorted(os.listdir(args.bin_dir)):
        path = os.path.join(args.bin_dir, name)
        if not (os.path.isfile(path) and os.access(path, os.X_OK)):
            continue
        libraries = needed(path)
        if libraries is None:
            continue
        checked += 1
        linked = [lib for lib in libraries if lib.startswith(RUNTIME_OPENED)]
        if linked:
            failures.append(f"{name} needs {', '.join(linked)} at start")
    # The worker and the GPU tests are the ones that use both libraries; they must be among those
    # looked at, or the check proves nothing.
    for must in ("tpserve-worker", "cuda_gemm_test", "nccl_communicator_test"):
        if not os.path.exists(os.path.join(args.bin_dir, must)):
            failures.append(f"{must} is not in {args.bin_dir}")
    # And they start: with both libraries pointed at files that do not exist (their loaders take
    # the variable's path first), the servers and the CLI still answer --help.
    env = dict(os.environ, TPSERVE_CUBLASLT_LIBRARY="/nonexistent/libcublasLt.so",
               TPSERVE_NCCL_LIBRARY="/nonexistent/libnccl.so")
    for name in ("tpserve-coordinator", "tpserve-worker", "tpserve", "tpctl"):
        run = subprocess.run([os.path.join(args.bin_dir, name), "--help"], env=env,
                             capture_output=True, text=True, timeout=30)
        if run.returncode != 0 or "Usage" not in run.stdout + run.stderr:
            failures.append(f"{name} --help without cuBLASLt and NCCL: exit {run.returncode}, "
                            f"{(run.stdout + run.stderr)[:200]!r}")
    print(f"{checked} executables checked")
    for failure in failures:
        print("FAIL:", failure)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
