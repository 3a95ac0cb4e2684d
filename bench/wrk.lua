-- wrk script: POST the review in $BODY as the apiserver does, and print one
-- machine-readable line of results. With $CLOSE set, every request asks for
-- a new connection, so each one pays a full TCP and TLS handshake.
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
if os.getenv("CLOSE") then
  wrk.headers["Connection"] = "close"
end
local f = assert(io.open(os.getenv("BODY"), "rb"))
wrk.body = f:read("*a")
f:close()

done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format("RESULT requests=%d duration_us=%d p50_us=%d p99_us=%d errors=%d non2xx=%d\n",
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(99),
    e.connect + e.read + e.write + e.timeout, e.status))
end
