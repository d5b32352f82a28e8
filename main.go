// Command meshtray turns a person's devices into one private mesh. See
// README.md; the code map is ARCHITECTURE.md.
package main

import (
	"os"

	"meshtray/app/cli"
)

func main() {
	os.Exit(cli.Run(os.Args[1:]))
}
