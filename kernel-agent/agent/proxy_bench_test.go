package agent

import (
	"fmt"
	"testing"
	"time"
)

// BenchmarkProxyUpdate measures one weights message for one CPE of a proxy
// serving 1024, from the message to the whole served set handed to the
// (dry-run) downlink and the CPE's state queued: the loop's cost per
// update, which grows with the served set (ApplyAll takes all of it).
func BenchmarkProxyUpdate(b *testing.B) {
	ids := make([]string, 1024)
	for i := range ids {
		ids[i] = fmt.Sprintf("cpe-%04d", i)
	}
	f := newFixture(b, b.TempDir(), ids...)
	for i, id := range ids {
		f.p.handle(cpeState(id, fmt.Sprintf(`{"nr":"10.%d.%d.1","wifi":"10.%d.%d.2"}`, 64+i/256, i%256, 64+i/256, i%256), `{"nr":"up","wifi":"up"}`))
	}
	f.p.flush(b.Context())
	msgs := make([]Message, b.N)
	for i := range msgs {
		msgs[i] = weights(ids[i%len(ids)], int64(1+i/len(ids)), t0, 3600, fmt.Sprintf(`{"nr":%d,"wifi":1}`, 1+i%200), `{"nr":1}`)
	}
	b.ResetTimer()
	start := time.Now()
	for i := range msgs {
		f.step(msgs[i])
		f.p.out.q.take()
		f.p.persist.take()
	}
	b.ReportMetric(float64(time.Since(start).Microseconds())/float64(b.N), "µs/update")
}
