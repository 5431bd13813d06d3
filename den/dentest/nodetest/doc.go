// Package nodetest runs real den nodes in tests, in the test process, with
// the test binary itself as their task runners: one harness for every
// package whose tests start a node (den's own, the web page's).
//
// A test binary that uses it serves the task-runner role from its
// TestMain:
//
//	func TestMain(m *testing.M) {
//		dentest.Main(m, map[string]func() int{"task-runner": nodetest.RunnerRole})
//	}
//
// It is apart from dentest because it imports den, whose own internal tests
// import dentest.
package nodetest
