package windows

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/pflag"

	"meshtray/app"
)

// Exit codes of meshtray-ui (those of the meshtray command for the same
// cases).
const (
	exitError      = 1
	exitUsage      = 2
	exitNotRunning = 4 // no node runs on the state dir
)

// Main is the meshtray-ui program (main.go built with -tags meshtray_ui):
//
//	meshtray-ui [--state-dir DIR] [--port PORT] [WINDOW [ARG]]
//
// It dials the node of DIR (app.Dial) and runs UI until its last window
// closes, SIGINT or SIGTERM, or the node goes away; it returns the exit
// code. The tray starts it, from the directory of its own executable.
func Main(args []string) int { return run(args, os.Stdout, os.Stderr) }

const usage = `meshtray-ui shows meshtray's windows (approvals, pairing, devices, peers,
the node manifest, questions from agents, sending files). The meshtray tray
starts it from its own directory when a window is wanted; run by hand, it
opens WINDOW: approvals, pair, devices, peers, peer DEVICE-ID, manifest,
questions, or send DEVICE [PATH...] (the paths are sent at once).

Usage: meshtray-ui [--state-dir DIR] [--port PORT] [WINDOW [ARG]]

`

func run(args []string, stdout, stderr io.Writer) int {
	fs := pflag.NewFlagSet("meshtray-ui", pflag.ContinueOnError)
	fs.SetOutput(stderr)
	stateDir := fs.String("state-dir", app.DefaultStateDir(), "state directory of the node whose windows to show")
	port := fs.Int("port", 0, "TCP port of the node (0: the one its state dir names)")
	version := fs.Bool("version", false, "print the version and exit")
	fs.Usage = func() {} // --help prints it below, to stdout
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			fmt.Fprint(stdout, usage)
			fs.SetOutput(stdout)
			fs.PrintDefaults()
			return 0
		}
		fmt.Fprintln(stderr, "meshtray-ui:", err, "(see meshtray-ui --help)")
		return exitUsage
	}
	if *version {
		fmt.Fprintln(stdout, "meshtray-ui", app.Version)
		return 0
	}
	if _, _, err := parseUIArgs(fs.Args()); err != nil {
		fmt.Fprintln(stderr, "meshtray-ui:", err)
		return exitUsage
	}
	c, err := app.Dial(*stateDir, *port)
	if c != nil {
		c.Where = app.WhereTray
	}
	if err != nil {
		fmt.Fprintln(stderr, "meshtray-ui:", err)
		var wrongPort *app.WrongPortError
		if errors.Is(err, app.ErrNotRunning) || errors.As(err, &wrongPort) {
			return exitNotRunning
		}
		return exitError
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := UI(ctx, c, fs.Args()); err != nil {
		fmt.Fprintln(stderr, "meshtray-ui:", err)
		return exitError
	}
	return 0
}
