package kubetest

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"
)

// waitHTTP polls url until it answers 200, the process exits, or ctx ends.
// Polling is the only way to learn a child is serving: neither etcd nor
// kube-apiserver signals readiness another way.
func waitHTTP(ctx context.Context, p *process, client *http.Client, url, token string) error {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var last string
	for {
		if ok, err := p.Exited(); ok {
			return fmt.Errorf("%s exited: %v", p.Name, err)
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return fmt.Errorf("probe %s: %w", url, err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := client.Do(req)
		if err == nil {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = fmt.Sprintf("%s: %s", resp.Status, body)
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s not ready (last answer: %s): %w", url, last, ctx.Err())
		case <-tick.C:
		}
	}
}
