// Package mqttclient connects the agent to the broker: MQTT 5 over mutual
// TLS (github.com/eclipse/paho.golang/autopaho, reconnecting with backoff),
// the retained offline last will on the state topic, and the subscriptions
// (a CPE: its own weights topic; a proxy: the weights and state topics of
// every CPE it serves), renewed on every reconnect, and one publish API
// (retained QoS 1 for states, QoS 0 for telemetry) for both roles. The agent connects
// out, so NAT in front of the CPE does not matter.
package mqttclient

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"os"
	"slices"
	"strconv"
	"time"

	"github.com/eclipse/paho.golang/autopaho"
	"github.com/eclipse/paho.golang/paho"

	"github.com/mcw-xapp/kernel-agent/payload"
)

// Shard counts: the fleet's default, and the bound (a topic segment and a
// lease key per shard on the xApp's side).
const (
	DefaultShards = 64
	MaxShards     = 4096
)

// ShardOf returns the shard of cpeID among shards (1..MaxShards): FNV-1a
// (32 bit) of the id's bytes modulo shards. The xApp computes the same
// (xapp/core/shards.py, same test vectors), so that a replica subscribes
// to the topics of the shards it holds only. It panics when shards is out
// of range, as an index would: the configuration is validated first.
func ShardOf(cpeID string, shards int) int {
	if shards < 1 || shards > MaxShards {
		panic(fmt.Sprintf("mqttclient: %d shards, want 1..%d", shards, MaxShards))
	}
	h := uint32(2166136261)
	for i := 0; i < len(cpeID); i++ {
		h ^= uint32(cpeID[i])
		h *= 16777619
	}
	return int(h % uint32(shards))
}

// Topics of one CPE: the weights the xApp sends it, and where its agent
// reports. LegacyState and LegacyTelemetry are the unsharded topics of
// earlier releases: a proxy still reads an old CPE agent's state there,
// and an agent clears its retained state there once (see agent.Start).
type Topics struct {
	Weights, State, Telemetry    string
	LegacyState, LegacyTelemetry string
}

// TopicsFor returns the topics of cpeID in a fleet of shards shards.
func TopicsFor(cpeID string, shards int) Topics {
	base := "mcw/v1/cpe/" + cpeID + "/"
	sharded := shardBase(cpeID, shards) + "cpe/" + cpeID + "/"
	return Topics{Weights: base + "weights", State: sharded + "state", Telemetry: sharded + "telemetry",
		LegacyState: base + "state", LegacyTelemetry: base + "telemetry"}
}

func shardBase(cpeID string, shards int) string {
	return "mcw/v1/s/" + strconv.Itoa(ShardOf(cpeID, shards)) + "/"
}

// ProxyTopics are a proxy's own topics.
type ProxyTopics struct {
	id     string
	shards int
}

// ProxyTopicsFor returns the topics of proxyID in a fleet of shards shards.
func ProxyTopicsFor(proxyID string, shards int) ProxyTopics {
	return ProxyTopics{id: proxyID, shards: shards}
}

// State is the proxy's own retained state (mcw.proxy-state.v1), unsharded:
// every xApp replica reads every proxy's state.
func (p ProxyTopics) State() string { return "mcw/v1/proxy/" + p.id + "/state" }

// CPEState is the proxy's retained downlink state for cpeID, in cpeID's
// shard.
func (p ProxyTopics) CPEState(cpeID string) string { return p.cpe(cpeID) + "state" }

// CPETelemetry is the proxy's downlink telemetry for cpeID, in cpeID's
// shard.
func (p ProxyTopics) CPETelemetry(cpeID string) string { return p.cpe(cpeID) + "telemetry" }

// LegacyCPEState is the unsharded topic of CPEState of earlier releases.
func (p ProxyTopics) LegacyCPEState(cpeID string) string {
	return "mcw/v1/proxy/" + p.id + "/cpe/" + cpeID + "/state"
}

func (p ProxyTopics) cpe(cpeID string) string {
	return shardBase(cpeID, p.shards) + "proxy/" + p.id + "/cpe/" + cpeID + "/"
}

// subscribeBatch bounds the subscriptions per SUBSCRIBE packet, so that a
// proxy with a thousand CPEs stays under the broker's max_packet_size
// (16 KiB in broker/mosquitto.conf; a topic costs about 40 bytes).
const subscribeBatch = 100

// Config configures a Client; the agent's core (agent.Agent) gives the
// identity, will and subscriptions of its role.
type Config struct {
	// BrokerURL, e.g. "mqtts://broker.example:8883" (schemes mqtts, tls, ssl;
	// plain mqtt only when TLS is nil, for development).
	BrokerURL string
	// TLS is the client's TLS configuration (see LoadTLS).
	TLS *tls.Config
	// ClientID is the CPE's or the proxy's id, equal to its certificate's CN.
	ClientID string
	// WillTopic and Will are the retained last will (QoS 1): the agent's
	// offline state.
	WillTopic string
	Will      []byte
	// Subscriptions are the topics read (QoS 1), renewed on reconnect.
	Subscriptions []string
	// OnMessage is called with every payload received on Subscriptions,
	// from the client's goroutine; it must not block.
	OnMessage func(topic string, data []byte, received time.Time)
	// KeepAlive in seconds; 0 means 30.
	KeepAlive uint16
	// OnConnect is called after each (re)connection and subscription, so
	// the agent can republish its retained state; it must not block.
	OnConnect func()
	// OnDisconnect is called when the connection drops; it must not block.
	OnDisconnect func()
	// OnError receives connection errors (for logging); may be nil.
	OnError func(error)
}

// Client is a connected (or reconnecting) MQTT client. It is safe for
// concurrent use.
type Client struct {
	cm *autopaho.ConnectionManager
}

// LoadTLS builds a mutual-TLS configuration from PEM files.
func LoadTLS(caFile, certFile, keyFile string) (*tls.Config, error) {
	ca, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("tls: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return nil, fmt.Errorf("tls: no certificate in %s", caFile)
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("tls: %w", err)
	}
	return &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, nil
}

// Connect starts the connection manager; it returns at once and keeps
// (re)connecting until ctx ends.
func Connect(ctx context.Context, cfg Config) (*Client, error) {
	u, err := url.Parse(cfg.BrokerURL)
	if err != nil {
		return nil, fmt.Errorf("mqtt: broker url: %w", err)
	}
	if !payload.ValidCPEID(cfg.ClientID) {
		return nil, fmt.Errorf("mqtt: invalid client id %q", cfg.ClientID)
	}
	if cfg.WillTopic == "" || len(cfg.Will) == 0 {
		return nil, errors.New("mqtt: no last will")
	}
	subs := cfg.Subscriptions
	will := &paho.WillMessage{Topic: cfg.WillTopic, Payload: cfg.Will, QoS: 1, Retain: true}
	if cfg.KeepAlive == 0 {
		cfg.KeepAlive = 30
	}
	cl := &Client{}
	onErr := func(err error) {
		if cfg.OnError != nil {
			cfg.OnError(err)
		}
	}
	acfg := autopaho.ClientConfig{
		ServerUrls:                    []*url.URL{u},
		TlsCfg:                        cfg.TLS,
		KeepAlive:                     cfg.KeepAlive,
		CleanStartOnInitialConnection: true,
		SessionExpiryInterval:         0,
		ReconnectBackoff:              autopaho.NewExponentialBackoff(500*time.Millisecond, 30*time.Second, time.Second, 2),
		ConnectTimeout:                10 * time.Second,
		WillMessage:                   will,
		OnConnectionUp: func(cm *autopaho.ConnectionManager, _ *paho.Connack) {
			// Subscribe from a goroutine: the callback must not block.
			go func() {
				sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				defer cancel()
				for batch := range slices.Chunk(subs, subscribeBatch) {
					opts := make([]paho.SubscribeOptions, len(batch))
					for i, t := range batch {
						opts[i] = paho.SubscribeOptions{Topic: t, QoS: 1}
					}
					if _, err := cm.Subscribe(sctx, &paho.Subscribe{Subscriptions: opts}); err != nil {
						onErr(fmt.Errorf("mqtt: subscribe %s (%d topics): %w", batch[0], len(batch), err))
						return
					}
				}
				if cfg.OnConnect != nil {
					cfg.OnConnect()
				}
			}()
		},
		OnConnectionDown: func() bool {
			if cfg.OnDisconnect != nil {
				cfg.OnDisconnect()
			}
			return true
		},
		OnConnectError: func(err error) { onErr(fmt.Errorf("mqtt: connect: %w", err)) },
		ClientConfig: paho.ClientConfig{
			ClientID: cfg.ClientID,
			OnPublishReceived: []func(paho.PublishReceived) (bool, error){
				func(pr paho.PublishReceived) (bool, error) {
					if cfg.OnMessage != nil {
						cfg.OnMessage(pr.Packet.Topic, pr.Packet.Payload, time.Now())
					}
					return true, nil
				},
			},
			OnClientError: func(err error) { onErr(fmt.Errorf("mqtt: client: %w", err)) },
		},
	}
	cm, err := autopaho.NewConnection(ctx, acfg)
	if err != nil {
		return nil, fmt.Errorf("mqtt: %w", err)
	}
	cl.cm = cm
	return cl, nil
}

// ErrNotConnected is returned by publishes while the connection is down.
var ErrNotConnected = errors.New("mqtt: not connected")

// ErrRefused is wrapped by a publish the broker acknowledged with an error
// reason (e.g. 0x87, not authorized by its ACL): sending it again will not
// help.
var ErrRefused = errors.New("refused by the broker")

// PublishRetained publishes a retained QoS 1 payload on topic (an empty
// one clears the topic's retained message) and waits for the broker's
// acknowledgement.
func (c *Client) PublishRetained(ctx context.Context, topic string, b []byte) error {
	return c.publish(ctx, topic, b, 1, true)
}

// PublishQoS0 publishes b on topic at QoS 0, not retained (telemetry).
func (c *Client) PublishQoS0(ctx context.Context, topic string, b []byte) error {
	return c.publish(ctx, topic, b, 0, false)
}

func (c *Client) publish(ctx context.Context, topic string, b []byte, qos byte, retain bool) error {
	resp, err := c.cm.Publish(ctx, &paho.Publish{Topic: topic, Payload: b, QoS: qos, Retain: retain})
	if err != nil {
		return fmt.Errorf("mqtt: publish %s: %w", topic, err)
	}
	if resp != nil && resp.ReasonCode >= 0x80 {
		return fmt.Errorf("mqtt: publish %s: %w with reason 0x%02x", topic, ErrRefused, resp.ReasonCode)
	}
	return nil
}

// Done is closed when the connection manager has stopped for good (its
// context ended or Disconnect); before that it keeps reconnecting.
func (c *Client) Done() <-chan struct{} { return c.cm.Done() }

// Disconnect sends DISCONNECT (so the broker does not publish the will:
// the agent publishes its offline state itself first) and waits for the
// connection manager to stop.
func (c *Client) Disconnect(ctx context.Context) error {
	if err := c.cm.Disconnect(ctx); err != nil && !errors.Is(err, autopaho.ConnectionDownError) {
		return fmt.Errorf("mqtt: disconnect: %w", err)
	}
	return nil
}

// CommonName returns the CN of the client certificate in cfg (as LoadTLS
// builds it): the broker's ACL knows the agent by it, so an agent whose
// configured id differs would subscribe to topics it can never read.
func CommonName(cfg *tls.Config) (string, error) {
	if cfg == nil || len(cfg.Certificates) == 0 || len(cfg.Certificates[0].Certificate) == 0 {
		return "", errors.New("tls: no client certificate")
	}
	leaf, err := x509.ParseCertificate(cfg.Certificates[0].Certificate[0])
	if err != nil {
		return "", fmt.Errorf("tls: client certificate: %w", err)
	}
	return leaf.Subject.CommonName, nil
}
