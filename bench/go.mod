module github.com/example/webhook/bench

go 1.26.8

require golang.org/x/image v0.47.0
