// Package brokertest runs Mosquitto with the shipped test configuration
// (broker/mosquitto.test.conf.in) for Go tests: one helper for the proxy's
// loopback test and the netns integration tests.
package brokertest

import (
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Options says how to run the broker.
type Options struct {
	// Dir holds the generated configuration, persistence and log.
	Dir string
	// PKI holds ca.crt; ServerCert and ServerKey are file names in it
	// (default server.crt, server.key).
	PKI                   string
	ServerCert, ServerKey string
	// ACL is the ACL file; empty: what broker/make-acl.sh prints for every
	// CPE certificate of PKI (cpe/*.crt), each granted its own shard of
	// the default count.
	ACL string
	// Listen is where the broker listens; an invalid one (the zero value)
	// is a free loopback port.
	Listen netip.AddrPort
	// Prefix runs Mosquitto through a command (e.g. ip netns exec NS).
	Prefix []string
	// In runs the readiness dial where the clients are (e.g. inside a
	// namespace); nil dials from here.
	In func(func() error) error
}

// RepoRoot is the repository's top directory.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", "..", ".."))
}

// Start runs the broker until the test ends and returns its address once it
// accepts connections.
func Start(t testing.TB, o Options) string {
	t.Helper()
	if o.ServerCert == "" {
		o.ServerCert, o.ServerKey = "server.crt", "server.key"
	}
	if o.ACL == "" {
		o.ACL = MakeACL(t, o.Dir, o.PKI)
	}
	if !o.Listen.IsValid() {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		o.Listen = netip.MustParseAddrPort(ln.Addr().String())
		ln.Close()
	}
	conf, err := os.ReadFile(filepath.Join(RepoRoot(), "broker", "mosquitto.test.conf.in"))
	if err != nil {
		t.Fatalf("shipped broker configuration: %v", err)
	}
	persist := filepath.Join(o.Dir, "mosquitto") + "/"
	if err := os.MkdirAll(persist, 0o700); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(o.Dir, "mosquitto.log")
	user := "root"
	if u := os.Getenv("USER"); u != "" {
		user = u
	}
	port := strconv.Itoa(int(o.Listen.Port()))
	text := strings.NewReplacer("@PORT@", port, "@CAFILE@", filepath.Join(o.PKI, "ca.crt"),
		"@CERTFILE@", filepath.Join(o.PKI, o.ServerCert), "@KEYFILE@", filepath.Join(o.PKI, o.ServerKey),
		"@ACLFILE@", o.ACL, "@PERSISTDIR@", persist, "@LOGFILE@", logPath, "@USER@", user).Replace(string(conf))
	// The shipped configuration listens on loopback; agents of other
	// namespaces reach it on another address.
	listen := "listener " + port + " 127.0.0.1"
	if !strings.Contains(text, listen) {
		t.Fatalf("mosquitto.test.conf.in has no %q line", listen)
	}
	text = strings.Replace(text, listen, "listener "+port+" "+o.Listen.Addr().String(), 1)
	confPath := filepath.Join(o.Dir, "mosquitto.conf")
	if err := os.WriteFile(confPath, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	args := append(append([]string{}, o.Prefix...), "mosquitto", "-c", confPath)
	cmd := exec.Command(args[0], args[1:]...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { Stop(cmd) })
	in := o.In
	if in == nil {
		in = func(f func() error) error { return f() }
	}
	addr := o.Listen.String()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		err := in(func() error {
			c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
			if err == nil {
				c.Close()
			}
			return err
		})
		if err == nil {
			return addr
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(logPath)
			t.Fatalf("mosquitto did not start: %v\n%s", err, log)
		}
	}
}

// MakeACL writes what broker/make-acl.sh prints for every CPE certificate
// of pki (cpe/*.crt, CN = file name) and the proxies given as
// PROXY_ID:CPE,... arguments into dir/acl, and returns its path.
func MakeACL(t testing.TB, dir, pki string, proxies ...string) string {
	t.Helper()
	certs, err := filepath.Glob(filepath.Join(pki, "cpe", "*.crt"))
	if err != nil {
		t.Fatal(err)
	}
	var cpes []string
	for _, c := range certs {
		cpes = append(cpes, strings.TrimSuffix(filepath.Base(c), ".crt"))
	}
	args := []string{filepath.Join(RepoRoot(), "broker", "make-acl.sh")}
	if len(cpes) > 0 {
		args = append(args, "--cpes", strings.Join(cpes, ","))
	}
	out, err := exec.Command("bash", append(args, proxies...)...).Output()
	if err != nil {
		t.Fatalf("make-acl.sh: %v", err)
	}
	path := filepath.Join(dir, "acl")
	if err := os.WriteFile(path, out, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// Stop ends a process started by a test: SIGTERM, then SIGKILL after 5 s.
func Stop(cmd *exec.Cmd) {
	if cmd.Process == nil {
		return
	}
	cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		cmd.Process.Kill()
		<-done
	}
}
