package policy

import (
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestNoExecOutsideTests enforces the daemon's rule (node_exporter bans
// os/exec with depguard the same way): the agent writes /proc/sys files and
// speaks netlink itself; only test code may run ip, tc or mosquitto. Test
// code includes a helper package under internal/ that no non-test file
// imports (internal/brokertest starts Mosquitto for the tests of several
// packages).
func TestNoExecOutsideTests(t *testing.T) {
	root := filepath.Join("..", "..")
	execers := map[string]string{} // package directory -> a file of it importing os/exec
	imported := map[string]bool{}  // module-relative package directories non-test files import
	const module = "github.com/mcw-xapp/kernel-agent/"
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "testdata" || d.Name() == "bin") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, filepath.Dir(path))
		if err != nil {
			return err
		}
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			if p == "os/exec" {
				execers[filepath.ToSlash(rel)] = path
			}
			if dir, ok := strings.CutPrefix(p, module); ok {
				imported[dir] = true
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for dir, path := range execers {
		if strings.HasPrefix(dir, "internal/") && !imported[dir] {
			continue // a helper only tests import
		}
		t.Errorf("%s imports os/exec: the agent must not shell out", path)
	}
}
