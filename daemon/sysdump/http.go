package sysdump

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
)

// Get fetches one path of the agent's health port: the status code and at
// most max bytes of the body. The health port serves one request per
// connection, so keep-alive is off.
func Get(ctx context.Context, addr, path string, max int64) (int, []byte, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return 0, nil, fmt.Errorf("health address %q: %w", addr, err)
	}
	// An agent listening on every address answers on loopback.
	switch host {
	case "", "0.0.0.0":
		host = "127.0.0.1"
	case "::":
		host = "::1"
	}
	url := "http://" + net.JoinHostPort(host, port) + path
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, nil, err
	}
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true, Proxy: nil}}
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, fmt.Errorf("GET %s: %w", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, max))
	if err != nil {
		return resp.StatusCode, body, fmt.Errorf("GET %s: %w", url, err)
	}
	return resp.StatusCode, body, nil
}
