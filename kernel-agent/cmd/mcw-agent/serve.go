package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/mcw-xapp/kernel-agent/supervisor"
)

// Health server: it proves it still answers by probing itself; any HTTP
// answer counts (a 503 from /healthz means another worker failed, not
// this one).
const (
	probeEvery   = 5 * time.Second
	probeTimeout = 2 * time.Second
	serveStall   = 20 * time.Second
)

// serveWorker serves h on ln (metrics and /healthz) as a supervised worker.
func serveWorker(ln net.Listener, h http.Handler) supervisor.Worker {
	return supervisor.Worker{Name: "http", Stall: serveStall, Run: func(ctx context.Context, beat func()) error {
		srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
		served := make(chan error, 1)
		go func() { served <- srv.Serve(ln) }()
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			srv.Shutdown(sctx)
		}()
		client := &http.Client{Timeout: probeTimeout}
		url := "http://" + ln.Addr().String() + "/healthz"
		t := time.NewTicker(probeEvery)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return nil
			case err := <-served:
				if errors.Is(err, http.ErrServerClosed) {
					err = errors.New("server closed")
				}
				return fmt.Errorf("http: %w", err)
			case <-t.C:
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
				if resp, err := client.Do(req); err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					beat()
				}
			}
		}
	}}
}
