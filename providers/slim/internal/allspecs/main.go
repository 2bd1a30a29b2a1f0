// Command allspecs prints the Specs of every provider of providers/all as
// a JSON array, sorted by name: the set that providers/slim must register
// too. A program cannot link both packages (they register the same
// names), so providers/slim's tests run this one to compare.
package main

import (
	"cmp"
	"encoding/json"
	"fmt"
	"os"
	"slices"

	"github.com/crabbox-dev/crabbox/provider"
	_ "github.com/crabbox-dev/crabbox/providers/all"
)

func main() {
	var specs []provider.Spec
	for _, p := range provider.Default().All() {
		specs = append(specs, p.Spec())
	}
	slices.SortFunc(specs, func(a, b provider.Spec) int { return cmp.Compare(a.Name, b.Name) })
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(specs); err != nil {
		fmt.Fprintln(os.Stderr, "allspecs:", err)
		os.Exit(1)
	}
}
