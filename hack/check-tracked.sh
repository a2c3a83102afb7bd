#!/usr/bin/env bash
# check-tracked.sh: no build output in the repository. Fails if a tracked file is over 1 MB or
# is an ELF binary (a `go build` at the root once committed two, 55 MB and 16 MB).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
git ls-files -z | perl -0 -ne '
	chomp; my $f = $_;
	next if -l $f || ! -f _;
	my $size = -s _;
	if ($size > 1_000_000) { print "tracked file over 1 MB: $f ($size bytes)\n"; $bad = 1 }
	open(my $h, "<:raw", $f) or die "$f: $!";
	read($h, my $magic, 4); close $h;
	if ($magic eq "\x7fELF") { print "tracked ELF binary: $f\n"; $bad = 1 }
	END {
		if ($bad) { print "remove them (git rm --cached) and ignore the build output in .gitignore\n"; exit 1 }
		print "tracked files: none over 1 MB, no ELF binary\n";
	}'
