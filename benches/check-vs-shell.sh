#!/usr/bin/env bash
# Median wall time of `accelready check` on the incident host tree (a
# Bottlerocket NVIDIA aarch64 node without DCGM), next to the same probe
# written as the obvious shell script (find / readlink -f / file), measured in
# one hyperfine run. Also measures both on the same tree with DCGM 4 installed,
# where the probes have a library to follow and inspect.
#
#   benches/check-vs-shell.sh            # builds target/release/accelready if missing
#
# Needs: hyperfine, file, aarch64-linux-gnu-gcc (.ci/setup installs them).
set -euo pipefail
cd "$(dirname "$0")/.."

BIN=target/release/accelready
[ -x "$BIN" ] || cargo build --release
CC=aarch64-linux-gnu-gcc
command -v "$CC" >/dev/null || { echo "need $CC (run .ci/setup)" >&2; exit 2; }

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

# --- the incident tree: driver loaded, NVML present, no DCGM ---------------
so() { # so OUT SONAME: a real aarch64 shared object
  echo "int probe(void) { return 42; }" > "$WORK/src.c"
  "$CC" -shared -fPIC -nostdlib -Wl,-soname,"$2" -o "$1" "$WORK/src.c"
}
make_tree() {
  local t=$1
  mkdir -p "$t"/proc/driver/nvidia "$t"/proc/bus/pci "$t"/dev "$t"/usr/lib/nvidia/tesla
  printf 'nvidia_uvm 1961984 0 - Live 0x0 (POE)\nnvidia 104751104 2 nvidia_uvm, Live 0x0 (POE)\n' > "$t/proc/modules"
  printf 'NVRM version: NVIDIA UNIX aarch64 Kernel Module  580.159.03  Sun Jan  4 10:00:00 UTC 2026\n' \
    > "$t/proc/driver/nvidia/version"
  printf '0000\t1d0f8061\t0\n0008\t10de1eb8\t47\n' > "$t/proc/bus/pci/devices"
  : > "$t/dev/nvidiactl"; : > "$t/dev/nvidia0"
  so "$t/usr/lib/nvidia/tesla/libnvidia-ml.so.1" libnvidia-ml.so.1
  for lib in libc.so.6 libm.so.6 libdl.so.2 libpthread.so.0 librt.so.1; do so "$t/usr/lib/$lib" "$lib"; done
  ln -s /usr/lib "$t/lib"; ln -s /usr/lib "$t/lib64"
}
INCIDENT=$WORK/incident
make_tree "$INCIDENT"
WITH_DCGM=$WORK/with-dcgm4
make_tree "$WITH_DCGM"
d=$WITH_DCGM/var/lib/accelready/dcgm/current/lib
mkdir -p "$d"
# DCGM's entry points (src/probe/dcgm.rs ENTRY_POINTS): check reads the
# dynamic symbol table and calls a library without them not-dcgm.
for f in dcgmInit dcgmShutdown dcgmConnect_v2 dcgmDisconnect dcgmStartEmbedded dcgmStopEmbedded; do
  echo "int $f(void) { return 0; }"
done > "$WORK/dcgm.c"
"$CC" -shared -fPIC -nostdlib -Wl,-soname,libdcgm.so.4 -Wl,--no-as-needed -o "$d/libdcgm.so.4.6.1" \
  "$WORK/dcgm.c" "$WITH_DCGM/usr/lib/libc.so.6"
ln -s libdcgm.so.4.6.1 "$d/libdcgm.so.4"
ln -s libdcgm.so.4 "$d/libdcgm.so"   # as provision installs it

# --- the obvious shell probe: same directories, same questions -------------
cat > "$WORK/probe.sh" <<'SH'
#!/usr/bin/env bash
# usage: probe.sh HOST_ROOT  -> prints a verdict, exits 0/10/11/20 like accelready
R=$1
dirs="usr/lib/nvidia/tesla usr/lib64 usr/lib usr/lib/aarch64-linux-gnu usr/local/nvidia/lib64"
loaded=no; grep -q '^nvidia ' "$R/proc/modules" 2>/dev/null && loaded=yes
version=$(sed -n 's/^NVRM version:.*  \([0-9][0-9.]*\)  .*/\1/p' "$R/proc/driver/nvidia/version" 2>/dev/null)
devices=$(find "$R/dev" -maxdepth 1 -name 'nvidia[0-9]*' 2>/dev/null | wc -l)
gpus=$(awk 'substr($2,1,4)=="10de"' "$R/proc/bus/pci/devices" 2>/dev/null | wc -l)
nvml=""
for d in $dirs; do [ -z "$nvml" ] && [ -e "$R/$d/libnvidia-ml.so.1" ] && nvml="/$d/libnvidia-ml.so.1"; done
echo "driver loaded=$loaded version=$version devices=$devices gpus=$gpus nvml=${nvml:-none}"
if [ $loaded = no ] || [ -z "$nvml" ]; then echo "verdict driver-missing"; exit 20; fi
hits=$(find $(for d in $dirs var/lib/accelready/dcgm/current/lib; do [ -d "$R/$d" ] && echo "$R/$d"; done) \
  -maxdepth 1 \( -name libdcgm.so.4 -o -name libdcgm.so.3 -o -name libdcgm.so \) 2>/dev/null)
if [ -z "$hits" ]; then echo "verdict dcgm-missing"; exit 10; fi
for hit in $hits; do
  real=$(readlink -f "$hit") || continue
  if file -L "$real" | grep -q 'ELF 64-bit LSB shared object, ARM aarch64'; then
    echo "dcgm $hit -> $real"; echo "verdict ready"; exit 0
  fi
  echo "dcgm $hit -> $real: $(file -b -L "$real")"
done
echo "verdict dcgm-unusable"; exit 11
SH
chmod +x "$WORK/probe.sh"

# Both must agree before we time them.
for tree in "$INCIDENT" "$WITH_DCGM"; do
  a=0; "$BIN" check --host-root "$tree" --arch aarch64 --json >/dev/null 2>&1 || a=$?
  s=0; "$WORK/probe.sh" "$tree" >/dev/null || s=$?
  [ "$a" = "$s" ] || { echo "disagree on $tree: accelready $a, shell $s" >&2; exit 1; }
done

hyperfine -N --warmup 20 --runs 300 -i --export-csv "$WORK/result.csv" \
  -n "accelready check (incident)" "$BIN check --host-root $INCIDENT --arch aarch64 --json" \
  -n "shell probe (incident)" "bash $WORK/probe.sh $INCIDENT" \
  -n "accelready check (dcgm 4)" "$BIN check --host-root $WITH_DCGM --arch aarch64 --json" \
  -n "shell probe (dcgm 4)" "bash $WORK/probe.sh $WITH_DCGM" >&2

# CSV columns: command,mean,stddev,median,... (seconds)
echo
awk -F, 'NR > 1 { name[NR] = $1; median[NR] = $4; printf "%-30s median %.2f ms\n", $1, $4 * 1000 }
  END {
    printf "ratio shell/accelready (incident): %.1fx\n", median[3] / median[2]
    printf "ratio shell/accelready (dcgm 4):   %.1fx\n", median[5] / median[4]
  }' "$WORK/result.csv"
