package train

// TestHookClose closes each rank's strategy in place of Strategy.Close
// (close_test.go).
var TestHookClose = &testHookClose
