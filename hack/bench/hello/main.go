// Command hello is the floor hack/bench measures a plugin's exec against: a
// Go binary that prints one line and exits.
package main

import "fmt"

func main() { fmt.Println("hello") }
