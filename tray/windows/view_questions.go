package windows

import (
	"slices"
	"strings"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/container"
	"fyne.io/fyne/v2/theme"
	"fyne.io/fyne/v2/widget"

	"meshtray/a2a/delegate"
)

// questionsView lists the delegated tasks whose agent waits for the owner
// (input-required or auth-required, A2A 0.3.0 §6.3), each with its question
// and an answer box. It takes values (set) and reports answers through
// answer; it knows nothing of HTTP. An answer being typed survives the
// refreshes a task event brings.
type questionsView struct {
	answer func(t delegate.OutboundTask, text string)

	tasks   []delegate.OutboundTask
	entries map[string]*widget.Entry  // by task id, kept across set
	buttons map[string]*widget.Button // by task id
	busy    map[string]bool           // answers sent, the task not yet moved on
	errs    map[string]string         // why the last answer did not go through

	list *fyne.Container
	root fyne.CanvasObject
}

func newQuestionsView(answer func(delegate.OutboundTask, string)) *questionsView {
	v := &questionsView{
		answer:  answer,
		entries: map[string]*widget.Entry{},
		buttons: map[string]*widget.Button{},
		busy:    map[string]bool{},
		errs:    map[string]string{},
		list:    container.NewVBox(),
	}
	v.root = container.NewPadded(newFixedWidth(520, container.NewVScroll(v.list)))
	v.set(nil)
	return v
}

// set shows the tasks that wait for the owner, oldest first.
func (v *questionsView) set(ts []delegate.OutboundTask) {
	v.tasks = slices.Clone(ts)
	slices.SortStableFunc(v.tasks, func(a, b delegate.OutboundTask) int { return a.Updated.Compare(b.Updated) })
	live := map[string]bool{}
	for _, t := range v.tasks {
		live[t.ID] = true
	}
	for id := range v.entries {
		if !live[id] {
			delete(v.entries, id)
			delete(v.buttons, id)
			delete(v.busy, id)
			delete(v.errs, id)
		}
	}
	v.render()
}

// answered reports the outcome of an answer: nil clears its box (the task
// leaves the list when the agent moves on).
func (v *questionsView) answered(id string, err error) {
	delete(v.busy, id)
	if err != nil {
		v.errs[id] = "Not sent: " + err.Error()
	} else {
		delete(v.errs, id)
		if e := v.entries[id]; e != nil {
			e.SetText("")
		}
	}
	v.render()
}

func (v *questionsView) send(t delegate.OutboundTask) {
	e := v.entries[t.ID]
	if e == nil || v.busy[t.ID] {
		return
	}
	text := strings.TrimSpace(e.Text)
	if text == "" {
		return
	}
	v.busy[t.ID] = true
	delete(v.errs, t.ID)
	v.render()
	v.answer(t, text)
}

func (v *questionsView) render() {
	objs := []fyne.CanvasObject{heading("Agents waiting for your answer")}
	if len(v.tasks) == 0 {
		objs = append(objs, mutedLabel("Nothing is waiting for you. When an agent this device delegated to asks a question, it shows here."))
	}
	for _, t := range v.tasks {
		objs = append(objs, v.card(t), widget.NewSeparator())
	}
	v.list.Objects = objs
	v.list.Refresh()
}

func (v *questionsView) card(t delegate.OutboundTask) fyne.CanvasObject {
	e := v.entries[t.ID]
	if e == nil {
		e = widget.NewEntry()
		e.SetPlaceHolder("Your answer")
		v.entries[t.ID] = e
	}
	b := v.buttons[t.ID]
	if b == nil {
		b = widget.NewButtonWithIcon("Answer", theme.MailReplyIcon(), nil)
		b.Importance = widget.HighImportance
		v.buttons[t.ID] = b
	}
	b.OnTapped = func() { v.send(t) }
	e.OnSubmitted = func(string) { v.send(t) }
	if v.busy[t.ID] {
		b.Disable()
		e.Disable()
	} else {
		b.Enable()
		e.Enable()
	}
	who := t.AgentName
	if who == "" {
		who = "An agent"
	}
	head := container.NewHBox(container.NewCenter(badge(string(t.State), stateColor(string(t.State)))), boldLabel(who+" asks"))
	q := strings.TrimSpace(t.Message)
	if q == "" {
		q = "(no question text: it waits for your input)"
	}
	rows := []fyne.CanvasObject{head, wrapLabel(q)}
	if t.Request != "" {
		rows = append(rows, mutedLabel("You asked: "+t.Request))
	}
	rows = append(rows, container.NewBorder(nil, nil, nil, b, e))
	if msg := v.errs[t.ID]; msg != "" {
		l := wrapLabel(msg)
		l.Importance = widget.DangerImportance
		rows = append(rows, l)
	}
	return container.NewVBox(rows...)
}
