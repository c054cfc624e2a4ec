// Package mqttclient connects the agent to the broker: MQTT 5 over mutual
// TLS (github.com/eclipse/paho.golang/autopaho, reconnecting with backoff),
// the retained offline last will on the state topic, and the subscription
// to the CPE's own weights topic, renewed on every reconnect. The agent
// connects out, so NAT in front of the CPE does not matter.
package mqttclient

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"os"
	"time"

	"github.com/eclipse/paho.golang/autopaho"
	"github.com/eclipse/paho.golang/paho"

	"github.com/mcw-xapp/kernel-agent/payload"
)

// Topics of one CPE.
type Topics struct {
	Weights, State, Telemetry string
}

// TopicsFor returns the topics of cpeID.
func TopicsFor(cpeID string) Topics {
	base := "mcw/v1/cpe/" + cpeID + "/"
	return Topics{Weights: base + "weights", State: base + "state", Telemetry: base + "telemetry"}
}

// Config configures a Client.
type Config struct {
	// BrokerURL, e.g. "mqtts://broker.example:8883" (schemes mqtts, tls, ssl;
	// plain mqtt only when TLS is nil, for development).
	BrokerURL string
	// TLS is the client's TLS configuration (see LoadTLS).
	TLS *tls.Config
	// CPEID is the CPE's identifier, equal to its certificate's CN.
	CPEID string
	// KeepAlive in seconds; 0 means 30.
	KeepAlive uint16
	// OnWeights is called with every payload received on the weights
	// topic, from the client's goroutine; it must not block.
	OnWeights func(data []byte, received time.Time)
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
	cm     *autopaho.ConnectionManager
	topics Topics
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
	if !payload.ValidCPEID(cfg.CPEID) {
		return nil, fmt.Errorf("mqtt: invalid cpe_id %q", cfg.CPEID)
	}
	if cfg.KeepAlive == 0 {
		cfg.KeepAlive = 30
	}
	topics := TopicsFor(cfg.CPEID)
	cl := &Client{topics: topics}
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
		WillMessage: &paho.WillMessage{
			Topic: topics.State, Payload: payload.Offline(cfg.CPEID), QoS: 1, Retain: true,
		},
		OnConnectionUp: func(cm *autopaho.ConnectionManager, _ *paho.Connack) {
			// Subscribe from a goroutine: the callback must not block.
			go func() {
				sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				defer cancel()
				if _, err := cm.Subscribe(sctx, &paho.Subscribe{
					Subscriptions: []paho.SubscribeOptions{{Topic: topics.Weights, QoS: 1}},
				}); err != nil {
					onErr(fmt.Errorf("mqtt: subscribe %s: %w", topics.Weights, err))
					return
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
			ClientID: cfg.CPEID,
			OnPublishReceived: []func(paho.PublishReceived) (bool, error){
				func(pr paho.PublishReceived) (bool, error) {
					if pr.Packet.Topic == topics.Weights && cfg.OnWeights != nil {
						cfg.OnWeights(pr.Packet.Payload, time.Now())
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

// PublishState publishes a retained QoS 1 state payload and waits for the
// broker's acknowledgement.
func (c *Client) PublishState(ctx context.Context, b []byte) error {
	return c.publish(ctx, c.topics.State, b, 1, true)
}

// PublishTelemetry publishes a QoS 0 telemetry payload.
func (c *Client) PublishTelemetry(ctx context.Context, b []byte) error {
	return c.publish(ctx, c.topics.Telemetry, b, 0, false)
}

func (c *Client) publish(ctx context.Context, topic string, b []byte, qos byte, retain bool) error {
	resp, err := c.cm.Publish(ctx, &paho.Publish{Topic: topic, Payload: b, QoS: qos, Retain: retain})
	if err != nil {
		return fmt.Errorf("mqtt: publish %s: %w", topic, err)
	}
	if resp != nil && resp.ReasonCode >= 0x80 {
		return fmt.Errorf("mqtt: publish %s: refused with reason 0x%02x", topic, resp.ReasonCode)
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
