"""The ``final`` note and query templates of the ``conditions`` and ``films`` generators.

For one blind final measurement only: whoever tunes the system must not read this module.
Chosen by ``templates="final"`` in :mod:`dpsynrag.eval.datasets_ordinary`. Same placeholders
and rules as the other variants there (each note holds its answer verbatim; queries share no
word with any answer).
"""

from __future__ import annotations

from dpsynrag.eval.template_set import TemplateSet

__all__ = ["CONDITION_TEMPLATES_FINAL", "FILM_TEMPLATES_FINAL"]

# Final: for a final measurement only; whoever tunes the system must not read these.
CONDITION_TEMPLATES_FINAL = TemplateSet(notes=(
    "Fit note issued {date}. {name} ({age}) is not fit for work because of {condition}, "
    "having had {symptoms}. Managing with {treatment}. GP: Dr. {doctor}; valid 14 days.",
    "Ambulance crew sheet, {date}, call 4471. Pt {name}, {age} yrs. C/O {symptoms}. Handed "
    "over to Dr. {doctor} at the walk-in unit, who started {treatment} for {condition}.",
    "Occupational health review {date}: employee {name}, aged {age}, referred by the line "
    "manager after {symptoms}. Opinion of Dr. {doctor} - {condition}; duties adjusted while "
    "on {treatment}.",
    "Travel insurance claim, section C, completed by Dr. {doctor} on {date}. Claimant: "
    "{name}, {age}. Illness claimed for: {condition}. Symptoms began abroad: {symptoms}. "
    "Treatment given: {treatment}.",
    "{condition} - {name}, {age}. Walk-in centre, {date}. Came with {symptoms}. Sent home on "
    "{treatment}; Dr. {doctor} to phone on Friday.",
    "Dear {name}, following your appointment on {date} I can confirm that your {symptoms} "
    "are due to {condition}. Please carry on with {treatment} as we discussed. Kind regards, "
    "Dr. {doctor}",
    "MDT minutes, {date}. Case 3: {name}, {age}, presented by Dr. {doctor}. Discussed: "
    "{symptoms}. Team view: {condition}. Action: {treatment}, reassess at the next meeting.",
    "Care home daily log, {date}. Resident {name} ({age}) unsettled overnight; staff noted "
    "{symptoms}. Dr. {doctor} visited this morning and is treating the resident for "
    "{condition} with {treatment}.",
    "EXPORT ROW {date}; {name}; {age}; {condition}; {treatment}; Dr. {doctor}; presenting "
    "with {symptoms}",
    "Out-of-hours call log, {date} 02:40. {name}, {age}, rang about {symptoms}. Dr. {doctor} "
    "is treating this as {condition} over the phone; advised {treatment} and to ring back if "
    "worse.",
), queries=(
    "Pharmacist question from {asker}: I've got {symptoms}. Before I buy anything, what "
    "ailment am I treating?",
    "Writing on behalf of my grandmother, who has had {symptoms} for a fortnight now. Could "
    "you tell us what she's got?",
    "{asker} (office worker): dealing with {symptoms}. Which medical term covers all that?",
    "Throwaway account. Three weeks of {symptoms}. Googling scares me, so can someone just "
    "say what this is?",
    "Nurse line, caller {asker}: reports {symptoms}. Caller wants to know what it points to.",
    "If someone came to you with {symptoms}, what would you write on their chart?",
))

FILM_TEMPLATES_FINAL = TemplateSet(notes=(
    "ratings_export.csv >> {date},{name},{title},{stars}/5,{genre},{director},\"{plot}\"",
    "Public library DVD loan, returned {date}: borrower {name} left a comment card in the "
    "case of {title}. \"A {genre} with {plot}. Would borrow again.\" Director on the sleeve: "
    "{director}.",
    "[Podcast transcript, ep. 112, {date}] {name}: So this week I finally sat down with "
    "{title}. It's a {genre}, {director} directing, and honestly {plot} - I did not expect "
    "that mix.",
    "Minutes of the film society AGM, {date}. Item 4: {name} proposed {title} for the spring "
    "programme; seconded. Members noted the {genre} covers {plot}.",
    "Media studies essay by {name}, handed in {date}. Film studied: {title}. In this "
    "{genre}, {director} uses {plot} to explore grief.",
    "#movie-night channel, {date} - {name}: vote closes at 8, my pick is {title}. "
    "{director} made it, it has {plot}. {genre} fans, you're welcome",
    "Complaint to the cinema manager, {date}. {name} writes: the projector failed twenty "
    "minutes into {title}, just as we reached the part with {plot}. Refund requested for "
    "this {genre}.",
    "Streaming account activity, profile \"{name}\". {date}: finished {title} (100%). "
    "Synopsis shown: {genre} from {director} with {plot}. Rating given: {stars}.",
    "For sale, collector's DVD of {title}, a cult {genre} by {director}. Sealed. Story has "
    "{plot}. Collection only, ask for {name}. Listed {date}.",
    "{date}: at breakfast {name} would not stop talking about {plot} - apparently it all "
    "happens in one {genre} from {director}, and it's called {title}.",
), queries=(
    "{asker} from a pub quiz team: we're stuck on a {genre} round. Clue reads: {plot}. Any "
    "guesses?",
    "My grandad describes a picture he loved as a boy: {plot}. He thinks it was a {genre}. "
    "Can anyone identify it?",
    "Doing a crossword and need a {genre} whose storyline features {plot}. Suggestions?",
    "Saw a trailer ages ago with {plot} and never caught its name. Help, {asker} here.",
    "Video rental clerk question: customer wants a {genre} about {plot} but doesn't know "
    "what it's named. Ideas?",
    "Settle a bet between me and my flatmate ({asker}): {plot} - which movie?",
))
