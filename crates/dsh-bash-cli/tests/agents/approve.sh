#!/bin/sh
# The test's approval policy for Claude Code's Elicitation hook: accept a
# question whose justification ends in "accept", decline every other.
input=$(cat)
case "$input" in
  *": accept"*) action=accept ;;
  *) action=decline ;;
esac
printf '{"hookSpecificOutput":{"hookEventName":"Elicitation","action":"%s","content":{}}}\n' "$action"
