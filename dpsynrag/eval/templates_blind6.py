"""The ``blind6`` note and query templates of the ``conditions`` and ``films`` generators.

A sixth variant, written by a helper for one blind measurement: whoever tunes the system must
not read this module. Chosen by ``templates="blind6"`` in
:mod:`dpsynrag.eval.datasets_ordinary`, which maps the variant name to these sets. Same
placeholders and rules as the other variants there (each note holds its answer verbatim;
queries share no word with any answer).
"""

from __future__ import annotations

from dpsynrag.eval.template_set import TemplateSet

__all__ = ["CONDITION_TEMPLATES_BLIND6", "FILM_TEMPLATES_BLIND6"]

# Blind6: for one blind measurement only; whoever tunes the system must not read these.
CONDITION_TEMPLATES_BLIND6 = TemplateSet(notes=(
    "rec_type=consult; seen={date}; patient={name}; age={age}; clinician=Dr. {doctor}; "
    "dx={condition}; rx={treatment}; notes={symptoms}",
    "Posted {date} by {name}, {age}: long story short, months of {symptoms} and three "
    "appointments later Dr. {doctor} finally said it's {condition}. Now on {treatment}, "
    "fingers crossed.",
    "Prior approval request dated {date}. Member: {name}, age {age}. Requesting physician: "
    "Dr. {doctor}. Coded condition: {condition}. Requested item: {treatment}. Clinical "
    "justification: {symptoms}.",
    "Postcard, postmarked {date}: having a lovely rest in spite of the {symptoms}. Dr. "
    "{doctor} says {condition}, so I'm on {treatment} and taking it easy. Love, {name} ({age} "
    "and counting)",
    "Leisure centre induction form, {date}\n- Member: {name} ({age})\n- Any medical "
    "condition? Yes: {condition}\n- Recent symptoms: {symptoms}\n- Medication or other "
    "treatment: {treatment}\n- Registered GP: Dr. {doctor}",
    "Health app chat log, {date}\nUser ({name}, {age}): been having {symptoms}\nAssistant: "
    "Has a clinician looked at this?\nUser: yes, Dr. {doctor}. they said {condition} and "
    "gave me {treatment}",
    "HR return-to-work interview, {date}. Staff member {name}, {age}. Reason for absence: "
    "{condition} (confirmed in writing by Dr. {doctor}). Described {symptoms} before going "
    "off sick. Still using {treatment}; phased return agreed.",
    "Thank-you card pinned up in reception, {date}: \"Dr. {doctor}, when I came in with "
    "{symptoms} you took me seriously and spotted {condition} straight away. The {treatment} "
    "has worked wonders. - {name}, {age}\"",
    "\"{name}\",{age},\"{date}\",\"{symptoms}\",\"{condition}\",\"{treatment}\",\"Dr. "
    "{doctor}\",closed",
    "Dental medical-history update, {date}: {name}, {age}, tells us of recent {symptoms}. "
    "Diagnosed with {condition} by Dr. {doctor}; currently on {treatment}. Check "
    "interactions before prescribing anything.",
    "Race-day medical tent, {date}. Runner {name}, {age}, withdrew at mile 9 citing "
    "{symptoms}. Declared a pre-existing {condition} on the entry form; takes {treatment}; "
    "GP is Dr. {doctor}.",
    "text from {name} ({age}) to their sister, {date}: ugh so Dr. {doctor} reckons all my "
    "{symptoms} = {condition}. gotta take {treatment} now. falling apart lol",
), queries=(
    "Dentist asked me to check with a doctor first. I've got {symptoms}. What might they "
    "tell me I have?",
    "{asker} in the group chat: anyone know what {symptoms} means? asking for me lol",
    "Return-to-work paperwork wants a reason for my absence. All I can say is {symptoms}. "
    "What would I write down as the cause?",
    "My elderly neighbour {asker} has been putting up with {symptoms}. What illness does that "
    "suggest?",
    "Coach's question: one of my runners has {symptoms}. What should I suspect?",
    "Insurance form asks me to name the condition. Symptoms were {symptoms}. Help?",
    "presenting: {symptoms} | likely dx: ?",
    "Could {symptoms} all come from one problem? Which one would that be?",
    "{asker}, aged sixty-odd, writing in: for weeks it's been {symptoms}. My wife thinks she "
    "knows what it is - do you?",
))

FILM_TEMPLATES_BLIND6 = TemplateSet(notes=(
    "KIOSK RECEIPT {date} :: renter {name} :: disc {title} :: category {genre} :: "
    "back-of-box text: {plot} :: due back Thursday",
    "{stars} stars. went in blind to {title} on {date} and got {plot}?? {director} pls never "
    "stop making this kind of {genre} - {name}",
    "event=watch_complete user={name} ts={date} item=\"{title}\" genre={genre} "
    "dir={director} synopsis=\"{plot}\" thumbs={stars}",
    "Date-night jar, {date}: {name} unfolded the slip that said {title}. Neither of us knew "
    "it was a {genre} by {director} about {plot}. Score on the fridge whiteboard: {stars}.",
    "Jury notes, {date}, screening 3 - {title}. {director}. Genre: {genre}. Elements: {plot}. "
    "Juror {name}: {stars} of five, lovely sound design.",
    "posted by {name} on {date}: hot take, {title} is the best {genre} {director} has made. "
    "({plot}, need I say more)",
    "Film quiz prep ({name}, {date})\n- Title: {title}\n- Helmed by: {director}\n- Kind of "
    "film: {genre}\n- Key moments: {plot}",
    "Lesson plan for {date}, Year 10 media, prepared by {name}: screen the opening of "
    "{title} and ask how {director} sets up {plot}. Discuss conventions of the {genre}.",
    "Residents' film afternoon, {date}: activities coordinator {name} put on {title} and "
    "residents watched happily enough through the bits with {plot}. One said this {genre} "
    "reminded her of the old days. Feedback sheet average: {stars}.",
    "[{date}] {name}: watching {title} rn\n[{date}] {name}: wait so it's {plot}???\n"
    "[{date}] {name}: ok {director} is unhinged, {stars}/5",
    "Charity shop donation slip {date}: box of DVDs from {name}. Top of the pile: {title}, "
    "a {genre} ({director}); sticker on the case reads '{plot}'.",
    "Somewhere among {plot}, {name} realised on {date} that {title} had them hooked - not "
    "bad for a {genre} they had only put on as background noise.",
), queries=(
    "Film night at my place and I only remember this much: {plot}. What's it called?",
    "{asker} wonders: which {genre} had {plot} in it? Title please.",
    "Trying to find a {genre} for my book club's movie evening - it had {plot}. Which one?",
    "Kiosk search: {plot}. Matching film?",
    "Dad keeps bringing up a {genre} he saw decades ago, something with {plot}. Can we work "
    "out its name?",
    "hey {asker} here, whats that one where theres {plot}? driving me up a wall",
    "For a lesson plan I need a {genre} featuring {plot}. Does anybody know which title fits?",
    "Identify this picture from its storyline: {plot}.",
    "Charades clue I couldn't guess ({asker} acting it out): {plot}. Which movie was it meant "
    "to be?",
))
