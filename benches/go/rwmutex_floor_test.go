// Go's RWMutex workloads beside the same loops with the lock replaced by its two atomic adds.
//
// benchmarkRWMutex is Go 1.19's (src/sync/rwmutex_test.go), copied so that both run in one
// `go test`; benchmarkAtomic2 is that loop with RLock/RUnlock replaced by the two
// atomic.AddInt32 calls they make when no writer is pending, and Lock/Unlock by nothing. If
// Go's RWMutex is faster than benchmarkAtomic2, its goroutines are taking turns on the CPUs
// (a parked reader's goroutine is readied on the waker's P) rather than running at once: the
// lock cannot be faster than its own atomics otherwise. The Rust counterpart is the `atomic2`
// floor of benches/rwlock.rs.
//
//	cd benches/go && go test -bench . -count 3
package floor

import (
	"sync"
	"sync/atomic"
	"testing"
)

func benchmarkRWMutex(b *testing.B, localWork, writeRatio int) {
	var rwm sync.RWMutex
	b.RunParallel(func(pb *testing.PB) {
		foo := 0
		for pb.Next() {
			foo++
			if foo%writeRatio == 0 {
				rwm.Lock()
				rwm.Unlock()
			} else {
				rwm.RLock()
				for i := 0; i != localWork; i += 1 {
					foo *= 2
					foo /= 2
				}
				rwm.RUnlock()
			}
		}
		_ = foo
	})
}

func benchmarkAtomic2(b *testing.B, localWork, writeRatio int) {
	var readers int32
	b.RunParallel(func(pb *testing.PB) {
		foo := 0
		for pb.Next() {
			foo++
			if foo%writeRatio == 0 {
				continue
			}
			if atomic.AddInt32(&readers, 1) < 0 {
				panic("negative reader count")
			}
			for i := 0; i != localWork; i += 1 {
				foo *= 2
				foo /= 2
			}
			if atomic.AddInt32(&readers, -1) < 0 {
				panic("negative reader count")
			}
		}
		_ = foo
	})
}

func BenchmarkRWMutexWrite100(b *testing.B) { benchmarkRWMutex(b, 0, 100) }
func BenchmarkAtomic2Write100(b *testing.B) { benchmarkAtomic2(b, 0, 100) }
func BenchmarkRWMutexWrite10(b *testing.B)  { benchmarkRWMutex(b, 0, 10) }
func BenchmarkAtomic2Write10(b *testing.B)  { benchmarkAtomic2(b, 0, 10) }

// No writes: if the writes' parking is what lets Go's readers take turns, this is as slow as
// benchmarkAtomic2.
func BenchmarkRWMutexWriteNever(b *testing.B) { benchmarkRWMutex(b, 0, 1<<30) }
