#!/usr/bin/env bash
# Launch by launch: runs `tests/bench/run.sh MODES... --rounds 1 --baselines mpi` N times and
# prints, for every row of its tables, ni's and Open MPI's launch medians sorted, with their
# median and quartiles. On a machine whose figures jump between clusters from one launch to
# the next (tests/bench/README.md, "The machine"), compare ni and Open MPI within a cluster,
# not one pooled median against another.
#
#   tests/bench/launches.sh N MODE... [run.sh options]
#   e.g. tests/bench/launches.sh 12 latency msgrate --sizes 8,1024 --ranks 2 --placements split
#
# Each launch's full output goes to $OUT/launch-K.log (OUT: a new directory under /tmp unless
# set); NIB_NO_BUILD and CARGO_TARGET_DIR pass through to run.sh.
set -euo pipefail
cd "$(dirname "$0")/../.."
N="${1:?usage: tests/bench/launches.sh N MODE... [run.sh options]}"
shift
[ "$N" -ge 1 ] 2>/dev/null || { echo "N must be a positive number of launches" >&2; exit 2; }
OUT="${OUT:-$(mktemp -d -t ni-launches.XXXXXX)}"
mkdir -p "$OUT"
rows="$OUT/rows.txt"
: >"$rows"
for k in $(seq "$N"); do
    log="$OUT/launch-$k.log"
    if ! tests/bench/run.sh "$@" --rounds 1 --baselines mpi --out "$OUT/launch-$k" >"$log" 2>&1; then
        echo "launch $k failed: $log" >&2
        tail -5 "$log" >&2
        exit 1
    fi
    # "<table> <placement> <P?> <size> ni mpi ratio": the table's name and placement come
    # from the headers above its rows.
    awk '/^# [a-z].* — /{t=substr($0, 3, index($0, " — ") - 3); gsub(/ /, "_", t)}
        /^# placement/{p=$3} /^[ \t]+([0-9]+[ \t]+)?[0-9]+K?[ \t]/{print t, p, $0}' \
        "$log" | tr -d '!*' >>"$rows"
    echo "launch $k/$N done" >&2
done
python3 - "$rows" <<'PY'
import collections, statistics, sys

seen = collections.OrderedDict()
for line in open(sys.argv[1]):
    f = line.split()
    # table placement [P] size ni mpi ratio
    if len(f) == 7:
        key, ni, mpi = " ".join(f[:2] + [f[2] + "x" + f[3]]), f[4], f[5]
    elif len(f) == 6:
        key, ni, mpi = " ".join(f[:3]), f[3], f[4]
    else:
        continue
    a, b = seen.setdefault(key, ([], []))
    a.append(float(ni))
    b.append(float(mpi))

def q(v, p):
    v = sorted(v)
    return v[round(p * (len(v) - 1))]

for key, (ni, mpi) in seen.items():
    for name, v in (("ni", ni), ("mpi", mpi)):
        print(f"{key if name == 'ni' else '':28} {name:3} median {statistics.median(v):8.3f}  "
              f"q25 {q(v, .25):8.3f}  q75 {q(v, .75):8.3f} | " + " ".join(f"{x:.3g}" for x in sorted(v)))
PY
echo "launch logs in $OUT" >&2
