package mqttclient

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestTopicsFor(t *testing.T) {
	got := TopicsFor("cpe-0001")
	want := Topics{Weights: "mcw/v1/cpe/cpe-0001/weights", State: "mcw/v1/cpe/cpe-0001/state", Telemetry: "mcw/v1/cpe/cpe-0001/telemetry"}
	if got != want {
		t.Fatalf("TopicsFor = %+v", got)
	}
}

func TestLoadTLSErrors(t *testing.T) {
	dir := t.TempDir()
	junk := filepath.Join(dir, "junk.pem")
	os.WriteFile(junk, []byte("not a certificate"), 0o600)
	for name, args := range map[string][3]string{
		"missing ca":   {filepath.Join(dir, "absent"), junk, junk},
		"ca not a PEM": {junk, junk, junk},
	} {
		if _, err := LoadTLS(args[0], args[1], args[2]); err == nil {
			t.Errorf("%s: LoadTLS succeeded", name)
		}
	}
}

func TestConnectRejectsBadConfig(t *testing.T) {
	for _, c := range []Config{
		{BrokerURL: "mqtts://127.0.0.1:1", ClientID: "cpe/1", WillTopic: "mcw/v1/cpe/cpe/1/state", Will: []byte("{}")},
		{BrokerURL: "://bad", ClientID: "cpe-1", WillTopic: "mcw/v1/cpe/cpe-1/state", Will: []byte("{}")},
		{BrokerURL: "mqtts://127.0.0.1:1", ClientID: "cpe-1"},
	} {
		if _, err := Connect(context.Background(), c); err == nil || !strings.Contains(err.Error(), "mqtt") {
			t.Errorf("Connect(%+v) = %v, want an error", c, err)
		}
	}
}
