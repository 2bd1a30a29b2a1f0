package lease_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/local"
)

// Lease IDs and run IDs have a fixed shape; slugs are friendly names.
func ExampleNewID() {
	id := lease.NewID()
	fmt.Println(len(id), lease.IsID(id), lease.IsID("cbx_nope"))
	fmt.Println(lease.IsRunID(lease.NewRunID()))
	fmt.Println(lease.ValidSlug("tidal-lobster"), lease.ValidSlug("Tidal Lobster"))
	// Output:
	// 16 true false
	// true
	// true false
}

// The store records a claim around the provider's acquire and drops it
// on release, here with a local box.
func ExampleStore_Acquire() {
	ctx := context.Background()
	state, _ := os.MkdirTemp("", "crabbox-state-")
	defer os.RemoveAll(state)

	store, err := lease.OpenStore(state)
	if err != nil {
		fmt.Println(err)
		return
	}
	boxes, err := local.New(local.Config{Root: filepath.Join(state, "local")}, provider.Runtime{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer boxes.Close()

	l, err := store.Acquire(ctx, boxes, lease.Terms{Slug: "blue-crab"})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(lease.IsID(l.Claim.ID), l.Claim.Slug, l.Claim.Provider, l.Claim.State)

	found, err := store.Find("blue-crab")
	fmt.Println(found.ID == l.Claim.ID, err)

	fmt.Println(store.Release(ctx, boxes, l.Claim))
	claims, err := store.List()
	fmt.Println(len(claims), err)
	// Output:
	// true blue-crab local ready
	// true <nil>
	// <nil>
	// 0 <nil>
}
