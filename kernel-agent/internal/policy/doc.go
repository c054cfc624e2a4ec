// Package policy holds repository-wide checks that run as tests: the
// written-down lint rules of the module.
package policy
