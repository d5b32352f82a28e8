//go:build race

package app_test

// raceEnabled: this test binary, and so every node it starts (apptest runs
// the test binary as meshtray), is built with -race, whose shadow memory
// and bookkeeping multiply a process's resident set.
const raceEnabled = true
