package wrrsysctl

import (
	"context"
	"encoding/json"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/mcw-xapp/kernel-agent/backend"
)

func TestEncodeIPv4(t *testing.T) {
	tests := []struct {
		addr string
		want uint32
	}{
		{"10.0.0.20", 335544330},
		{"0.0.0.0", 0},
		{"192.168.1.1", 16885952},
		{"255.255.255.255", 4294967295},
		{"10.31.1.1", 16850698},
	}
	for _, tt := range tests {
		t.Run(tt.addr, func(t *testing.T) {
			got, err := EncodeIPv4(netip.MustParseAddr(tt.addr))
			if err != nil || got != tt.want {
				t.Fatalf("EncodeIPv4(%s) = %d, %v; want %d", tt.addr, got, err, tt.want)
			}
			if back := DecodeIPv4(got); got != 0 && back != netip.MustParseAddr(tt.addr) {
				t.Fatalf("DecodeIPv4(%d) = %s", got, back)
			}
		})
	}
	if _, err := EncodeIPv4(netip.MustParseAddr("::1")); err == nil {
		t.Fatal("EncodeIPv4(::1) succeeded, want an error")
	}
}

func TestEncodePort(t *testing.T) {
	for _, tt := range []struct{ port, want uint16 }{{0, 0}, {80, 20480}, {443, 47873}, {5201, 20756}} {
		if got := EncodePort(tt.port); got != tt.want {
			t.Errorf("EncodePort(%d) = %d, want %d", tt.port, got, tt.want)
		}
	}
}

func TestFormatParse(t *testing.T) {
	tuples := []Tuple{
		{Src: netip.MustParseAddr("10.0.0.20"), Weight: 30},
		{Src: netip.MustParseAddr("10.0.1.20"), Dst: netip.MustParseAddr("192.168.1.1"), Weight: 100, SrcPort: 80, DstPort: 443},
	}
	text, err := Format(tuples)
	if err != nil {
		t.Fatal(err)
	}
	if want := "335544330 0 30 0 0 335609866 16885952 100 20480 47873"; text != want {
		t.Fatalf("Format = %q, want %q", text, want)
	}
	back, err := Parse(text + "\n")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(tuples, back, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
		t.Fatalf("Parse (-want +got):\n%s", diff)
	}
	for _, bad := range []string{"1 2 3 4", "1 2 256 0 0", "x 0 1 0 0", "4294967296 0 1 0 0"} {
		if _, err := Parse(bad); err == nil {
			t.Errorf("Parse(%q) succeeded, want an error", bad)
		}
	}
	if _, err := Format([]Tuple{{Weight: 256}}); err == nil {
		t.Error("Format(weight 256) succeeded")
	}
}

// vectorFile is the shared test-vector file the Python twin also checks.
const vectorFile = "../../../schemas/testdata/wrr-sysctl-vectors.json"

type vector struct {
	Tuples []struct {
		SrcIP   string `json:"src_ip"`
		DstIP   string `json:"dst_ip"`
		Weight  int    `json:"weight"`
		SrcPort uint16 `json:"src_port"`
		DstPort uint16 `json:"dst_port"`
	} `json:"tuples"`
	Text string `json:"text"`
}

func TestSharedVectors(t *testing.T) {
	data, err := os.ReadFile(vectorFile)
	if errors.Is(err, os.ErrNotExist) {
		t.Skipf("shared vectors %s absent (written by the Python side)", vectorFile)
	}
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Vectors []vector `json:"vectors"`
	}
	if err := json.Unmarshal(data, &file); err != nil {
		t.Fatalf("%s: %v", vectorFile, err)
	}
	vectors := file.Vectors
	if len(vectors) == 0 {
		t.Fatalf("%s holds no vectors", vectorFile)
	}
	for i, v := range vectors {
		tuples := make([]Tuple, len(v.Tuples))
		for j, tu := range v.Tuples {
			tuples[j] = Tuple{Weight: tu.Weight, SrcPort: tu.SrcPort, DstPort: tu.DstPort}
			for _, f := range []struct {
				s   string
				dst *netip.Addr
			}{{tu.SrcIP, &tuples[j].Src}, {tu.DstIP, &tuples[j].Dst}} {
				if f.s == "" || f.s == "0" || f.s == "0.0.0.0" {
					continue
				}
				a, err := netip.ParseAddr(f.s)
				if err != nil {
					t.Fatalf("vector %d tuple %d: %v", i, j, err)
				}
				*f.dst = a
			}
		}
		got, err := Format(tuples)
		if err != nil {
			t.Fatalf("vector %d: Format: %v", i, err)
		}
		if got != strings.TrimSpace(v.Text) {
			t.Errorf("vector %d: Format = %q, want %q", i, got, v.Text)
		}
		back, err := Parse(v.Text)
		if err != nil {
			t.Fatalf("vector %d: Parse: %v", i, err)
		}
		if diff := cmp.Diff(tuples, back, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
			t.Errorf("vector %d: Parse (-want +got):\n%s", i, diff)
		}
	}
}

// newTree makes a temporary /proc/sys and /sys with the WRR kernel's files.
func newTree(t *testing.T) Config {
	t.Helper()
	dir := t.TempDir()
	cfg := Config{ProcSysRoot: filepath.Join(dir, "proc/sys"), SysRoot: filepath.Join(dir, "sys")}
	for _, f := range []string{
		filepath.Join(cfg.ProcSysRoot, schedulerFile),
		filepath.Join(cfg.ProcSysRoot, weightsFile),
		filepath.Join(cfg.SysRoot, cwndLimitedFile),
	} {
		if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f, []byte("default\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return cfg
}

func TestApply(t *testing.T) {
	cfg := newTree(t)
	b, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	paths := []backend.Path{
		{WAT: "nr", Interface: "nr0", Addr: netip.MustParseAddr("10.0.0.20"), Weight: 30},
		{WAT: "wifi", Interface: "wlan0", Addr: netip.MustParseAddr("10.0.1.20"), Weight: 100},
		{WAT: "lifi", Interface: "lifi0", Weight: 1}, // no address: skipped
	}
	if err := b.Apply(context.Background(), paths); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	for file, want := range map[string]string{
		filepath.Join(cfg.ProcSysRoot, weightsFile):   "335544330 0 30 0 0 335609866 0 100 0 0\n",
		filepath.Join(cfg.ProcSysRoot, schedulerFile): "roundrobin\n",
		filepath.Join(cfg.SysRoot, cwndLimitedFile):   "N\n",
	} {
		got, err := os.ReadFile(file)
		if err != nil || string(got) != want {
			t.Errorf("%s = %q, %v; want %q", file, got, err, want)
		}
	}
}

func TestApplyErrors(t *testing.T) {
	paths := []backend.Path{{WAT: "nr", Addr: netip.MustParseAddr("10.0.0.20"), Weight: 3}}
	t.Run("missing sysctl", func(t *testing.T) {
		b, _ := New(Config{ProcSysRoot: t.TempDir(), SysRoot: t.TempDir()})
		if err := b.Apply(context.Background(), paths); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("Apply = %v, want ErrNotExist", err)
		}
	})
	t.Run("read-back mismatch", func(t *testing.T) {
		cfg := newTree(t)
		w := filepath.Join(cfg.ProcSysRoot, weightsFile)
		os.Remove(w)
		// /dev/null accepts the write and reads back empty, as a kernel that
		// silently refused the rule would.
		if err := os.Symlink("/dev/null", w); err != nil {
			t.Fatal(err)
		}
		b, _ := New(cfg)
		err := b.Apply(context.Background(), paths)
		if err == nil || !strings.Contains(err.Error(), "read back") {
			t.Fatalf("Apply = %v, want a read-back error", err)
		}
	})
	t.Run("cwnd_limited already set, file read-only", func(t *testing.T) {
		cfg := newTree(t)
		c := filepath.Join(cfg.SysRoot, cwndLimitedFile)
		if err := os.WriteFile(c, []byte("N\n"), 0o444); err != nil {
			t.Fatal(err)
		}
		os.Chmod(c, 0o444)
		b, _ := New(cfg)
		if err := b.Apply(context.Background(), paths); err != nil {
			t.Fatalf("Apply with cwnd_limited already N: %v", err)
		}
	})
	t.Run("ipv6 address", func(t *testing.T) {
		b, _ := New(newTree(t))
		err := b.Apply(context.Background(), []backend.Path{{WAT: "nr", Addr: netip.MustParseAddr("fd00::1"), Weight: 1}})
		if err == nil {
			t.Fatal("Apply(IPv6) succeeded")
		}
	})
}

// memDir returns a directory on tmpfs when the machine has /dev/shm: the
// real /proc/sys is in memory, while a disk file system adds what the
// kernel never does (ext4 flushes a truncated-and-rewritten file on close,
// auto_da_alloc, costing milliseconds).
func memDir(b *testing.B) string {
	dir, err := os.MkdirTemp("/dev/shm", "wrrsysctl-bench-")
	if err != nil {
		return b.TempDir()
	}
	b.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func BenchmarkApply(b *testing.B) {
	dir := memDir(b)
	cfg := Config{ProcSysRoot: filepath.Join(dir, "proc/sys"), SysRoot: filepath.Join(dir, "sys")}
	for _, f := range []string{filepath.Join(cfg.ProcSysRoot, schedulerFile), filepath.Join(cfg.ProcSysRoot, weightsFile), filepath.Join(cfg.SysRoot, cwndLimitedFile)} {
		os.MkdirAll(filepath.Dir(f), 0o755)
		os.WriteFile(f, nil, 0o644)
	}
	be, _ := New(cfg)
	paths := []backend.Path{
		{WAT: "nr", Addr: netip.MustParseAddr("10.0.0.20"), Weight: 30},
		{WAT: "wifi", Addr: netip.MustParseAddr("10.0.1.20"), Weight: 100},
		{WAT: "lifi", Addr: netip.MustParseAddr("10.0.2.20"), Weight: 1},
	}
	for i := 0; i < b.N; i++ {
		paths[0].Weight = 1 + i%255
		if err := be.Apply(context.Background(), paths); err != nil {
			b.Fatal(err)
		}
	}
}
