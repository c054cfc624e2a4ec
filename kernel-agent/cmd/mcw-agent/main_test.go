package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcw-xapp/kernel-agent/config"
)

// writeCert writes a self-signed certificate with CN cn, its key and the
// certificate again as the CA file, and returns their paths.
func writeCert(t *testing.T, cn string) (ca, cert, key string) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cert, key = filepath.Join(dir, "c.crt"), filepath.Join(dir, "c.key")
	os.WriteFile(cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	os.WriteFile(key, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600)
	return cert, cert, key
}

// TestLoadTLSChecksCN: each role runs only with a certificate whose CN is
// its configured id, the identity the broker's ACL knows it by.
func TestLoadTLSChecksCN(t *testing.T) {
	for _, tc := range []struct {
		name, cn string
		cfg      config.Config
		wantErr  string
	}{
		{"cpe", "cpe-0001", config.Config{Role: "cpe", CPEID: "cpe-0001"}, ""},
		{"proxy", "proxy-0001", config.Config{Role: "proxy", ProxyID: "proxy-0001"}, ""},
		{"cpe with a proxy certificate", "proxy-0001", config.Config{Role: "cpe", CPEID: "cpe-0001"}, `certificate CN "proxy-0001" is not the configured cpe_id "cpe-0001"`},
		{"proxy with a CPE certificate", "cpe-0001", config.Config{Role: "proxy", ProxyID: "proxy-0001"}, `certificate CN "cpe-0001" is not the configured proxy_id "proxy-0001"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ca, cert, key := writeCert(t, tc.cn)
			tc.cfg.MQTT = config.MQTT{CAFile: ca, CertFile: cert, KeyFile: key}
			_, err := loadTLS(tc.cfg)
			if (tc.wantErr == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("loadTLS = %v, want %q", err, tc.wantErr)
			}
		})
	}
}
