// Package golden reads the tab-separated golden lists of tests. It imports
// testing, so only tests may import it.
package golden

import (
	"bufio"
	"os"
	"strings"
	"testing"
)

// Rows returns the rows of the golden file at path, each split at tabs;
// blank lines and lines starting with # are comments. A row with fewer than
// minCols or more than maxCols fields fails the test.
func Rows(t testing.TB, path string, minCols, maxCols int) [][]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var rows [][]string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		l := sc.Text()
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		p := strings.Split(l, "\t")
		if len(p) < minCols || len(p) > maxCols {
			t.Fatalf("%s: line %q has %d tab-separated fields, want %d to %d", path, l, len(p), minCols, maxCols)
		}
		rows = append(rows, p)
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("reading %s: %v", path, err)
	}
	return rows
}
