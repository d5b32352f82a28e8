package nodes

import (
	"slices"
	"strconv"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

var englishPrinter = message.NewPrinter(language.English)

// paramError turns a jsonschema validation error tree into a ParamError:
// every "required" failure adds its absent properties to Missing (nested
// ones as "parent.name"), every other leaf failure adds "location: reason"
// to Invalid. Both lists are sorted and without duplicates.
func paramError(capName string, ve *jsonschema.ValidationError) *ParamError {
	pe := &ParamError{Capability: capName}
	var walk func(e *jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) > 0 {
			for _, c := range e.Causes {
				walk(c)
			}
			return
		}
		switch k := e.ErrorKind.(type) {
		case *kind.Required:
			for _, m := range k.Missing {
				pe.Missing = append(pe.Missing, paramPath(append(slices.Clip(e.InstanceLocation), m)))
			}
		case *kind.AdditionalProperties:
			for _, p := range k.Properties {
				pe.Invalid = append(pe.Invalid, paramPath(append(slices.Clip(e.InstanceLocation), p))+": unknown parameter")
			}
		default:
			pe.Invalid = append(pe.Invalid, paramPath(e.InstanceLocation)+": "+e.ErrorKind.LocalizedString(englishPrinter))
		}
	}
	walk(ve)
	slices.Sort(pe.Missing)
	pe.Missing = slices.Compact(pe.Missing)
	slices.Sort(pe.Invalid)
	pe.Invalid = slices.Compact(pe.Invalid)
	if len(pe.Missing) == 0 && len(pe.Invalid) == 0 {
		pe.Invalid = []string{"params: " + ve.ErrorKind.LocalizedString(englishPrinter)}
	}
	return pe
}

// paramPath renders an instance location as a parameter name: argv[0],
// options.mode; the root is "params".
func paramPath(loc []string) string {
	if len(loc) == 0 {
		return "params"
	}
	var b strings.Builder
	for i, p := range loc {
		if _, err := strconv.Atoi(p); err == nil && i > 0 {
			b.WriteString("[" + p + "]")
			continue
		}
		if i > 0 {
			b.WriteByte('.')
		}
		b.WriteString(p)
	}
	return b.String()
}
