package app_test

// Texts a person meets in the tables and when another device, or the
// node itself, is gone.

import (
	"regexp"
	"testing"

	"meshtray/app"
)

// TestGrantTablesShowFilesPolicy: grant list and devices show each
// grant's files policy beside its delegation policy (ask when never set),
// as --json has files_approval.
func TestGrantTablesShowFilesPolicy(t *testing.T) {
	n := ptStart(t, "alpha")
	var phone, agent app.GrantToken
	ptJSON(t, n, &phone, "grant", "create", "--name", "phone", "--scopes", "agent")
	ptJSON(t, n, &agent, "grant", "create", "--name", "ci", "--scopes", "agent", "--approval", "allow")
	ptCLI(t, n, "grant", "set", phone.ID, "--files", "allow")
	for _, cmd := range []string{"grant list", "devices"} {
		args := regexp.MustCompile(" ").Split(cmd, -1)
		out := ptCLI(t, n, args...).Stdout
		for _, want := range []string{
			`(?m)^ID\s+NAME\s+SCOPES\s+APPROVAL\s+FILES\s+STATUS\s+LAST USED$`,
			`(?m)^` + phone.ID + `\s+phone\s+agent\s+ask\s+allow\s+active\s`,
			`(?m)^` + agent.ID + `\s+ci\s+agent\s+allow\s+ask\s+active\s`,
		} {
			if !regexp.MustCompile(want).MatchString(out) {
				t.Errorf("meshtray %s does not match %s:\n%s", cmd, want, out)
			}
		}
	}
}
