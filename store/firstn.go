package store

import (
	"container/heap"
	"slices"
)

// firstN keeps the n+1 first of the values added, by cmp: a page of n,
// and whether more follow, cost a pass over a list and no sort of it.
type firstN[T any] struct {
	n   int
	cmp func(a, b T) int
	h   []T // a heap, the last of those kept on top
}

func newFirstN[T any](n int, cmp func(a, b T) int) *firstN[T] {
	return &firstN[T]{n: n, cmp: cmp}
}

func (f *firstN[T]) add(v T) {
	switch {
	case len(f.h) <= f.n:
		heap.Push(f, v)
	case f.cmp(v, f.h[0]) < 0:
		f.h[0] = v
		heap.Fix(f, 0)
	}
}

// page returns the n first, in order, and whether more were added.
func (f *firstN[T]) page() (first []T, more bool) {
	slices.SortFunc(f.h, f.cmp)
	if len(f.h) > f.n {
		return f.h[:f.n], true
	}
	return f.h, false
}

// heap.Interface.
func (f *firstN[T]) Len() int           { return len(f.h) }
func (f *firstN[T]) Less(i, j int) bool { return f.cmp(f.h[i], f.h[j]) > 0 }
func (f *firstN[T]) Swap(i, j int)      { f.h[i], f.h[j] = f.h[j], f.h[i] }
func (f *firstN[T]) Push(x any)         { f.h = append(f.h, x.(T)) }
func (f *firstN[T]) Pop() any {
	v := f.h[len(f.h)-1]
	f.h = f.h[:len(f.h)-1]
	return v
}
