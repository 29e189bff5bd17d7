package metrictest

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
)

func TestValues(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "x_total", Help: "x"}, []string{"kind", "result"})
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "y", Help: "y"})
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "z_seconds", Help: "z"})
	reg.MustRegister(c, g, h)
	c.WithLabelValues("a", "ok").Add(2)
	g.Set(3)
	h.Observe(1)
	h.Observe(2)
	want := map[string]float64{`x_total{kind="a"}{result="ok"}`: 2, "y": 3, "z_seconds_count": 2}
	if diff := cmp.Diff(want, Values(t, reg)); diff != "" {
		t.Errorf("Values (-want +got):\n%s", diff)
	}
	one := prometheus.NewCounter(prometheus.CounterOpts{Name: "one_total", Help: "one"})
	one.Add(5)
	if got := Counter(t, one); got != 5 {
		t.Errorf("Counter = %v, want 5", got)
	}
}
