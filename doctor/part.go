package doctor

import "github.com/example/webhook/part"

// Part is `webhook doctor`, as main.go's table of parts lists it.
func Part() part.Part {
	return part.Part{
		Name:    "doctor",
		Usage:   "doctor -f FILE     check webhook configurations as the apiserver calls them (webhook doctor -h)",
		Command: Run,
	}
}
