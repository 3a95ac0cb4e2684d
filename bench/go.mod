module github.com/example/webhook/bench

go 1.26.8

require (
	golang.org/x/image v0.47.0
	sigs.k8s.io/yaml v1.6.0
)

require go.yaml.in/yaml/v2 v2.4.2 // indirect

require (
	golang.org/x/net v0.61.0
	golang.org/x/text v0.43.0 // indirect
)
