#!/usr/bin/env bash
# fuzz.sh: runs every Go native fuzz target of hack/fuzz-targets.txt for FUZZTIME each
# (default 15s), one after another, starting from its committed corpus
# (<pkg>/testdata/fuzz/<Name>/). A crasher fails the run and is written by `go test` under
# that testdata dir: commit it with the fix as a regression seed.
# The seeds alone also run in every plain `go test`, so this stage is the search for new
# inputs, bounded so CI keeps its time budget.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export PATH=/usr/local/go/bin:$PATH
FUZZTIME=${FUZZTIME:-15s}

while read -r pkg name; do
	[[ -z "$pkg" || "$pkg" == \#* ]] && continue
	echo "--- fuzz $pkg $name ($FUZZTIME)"
	# -parallel 2: the machine has 2 cores. -fuzzminimizetime=20x: the default 60s minimisation
	# of each new input would eat the whole budget instead of fuzzing.
	go test -run='^$' -fuzz="^${name}\$" -fuzztime="$FUZZTIME" -fuzzminimizetime=20x -parallel=2 "$pkg"
done <hack/fuzz-targets.txt
