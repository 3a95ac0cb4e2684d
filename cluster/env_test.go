package cluster

import "log/slog"

var discardLogger = slog.New(slog.DiscardHandler)

// testEnv is the environment the tests give: none.
func testEnv(string) string { return "" }
