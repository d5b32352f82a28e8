// Command meshtray turns a person's devices into one private mesh. See
// README.md; the code map is ARCHITECTURE.md.
package main

import (
	"os"

	"meshtray/app"
)

func main() {
	os.Exit(app.Main(os.Args[1:], cliOptions()))
}
