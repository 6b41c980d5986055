package policy

import "sync"

// arrivals lets an ADD wait for its pod to reach the informer cache: the
// runtime can call us before the watch event for a brand-new pod arrives.
// Waiters register before they look in the cache, so an event between the
// look and the wait is never lost.
type arrivals struct {
	mu      sync.Mutex
	waiters map[string][]chan struct{} // by namespace/name
}

func newArrivals() *arrivals {
	return &arrivals{waiters: map[string][]chan struct{}{}}
}

// watch returns a channel closed when key is next added or updated, and a
// func that forgets the channel; call it when done waiting.
func (a *arrivals) watch(key string) (<-chan struct{}, func()) {
	ch := make(chan struct{})
	a.mu.Lock()
	a.waiters[key] = append(a.waiters[key], ch)
	a.mu.Unlock()
	return ch, func() {
		a.mu.Lock()
		defer a.mu.Unlock()
		ws := a.waiters[key]
		for i, w := range ws {
			if w == ch {
				ws = append(ws[:i], ws[i+1:]...)
				break
			}
		}
		if len(ws) == 0 {
			delete(a.waiters, key)
		} else {
			a.waiters[key] = ws
		}
	}
}

// arrived wakes everyone waiting for key; each re-registers if it still
// has to wait.
func (a *arrivals) arrived(key string) {
	a.mu.Lock()
	ws := a.waiters[key]
	delete(a.waiters, key)
	a.mu.Unlock()
	for _, w := range ws {
		close(w)
	}
}
